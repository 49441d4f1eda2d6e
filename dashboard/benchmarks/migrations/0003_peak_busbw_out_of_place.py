"""peak_busbw becomes the out-of-place busbw at the largest message size (issue 32).

It held the larger of the out-of-place and in-place figures there, so pages
disagreed; every recorded job's figure is taken again from its result's rows.
"""

from django.db import migrations, models

from dashboard.benchmarks.models import busbw_at_largest


def out_of_place(apps, schema_editor):
    BenchmarkJob = apps.get_model("benchmarks", "BenchmarkJob")
    for job in BenchmarkJob.objects.filter(peak_busbw__isnull=False).only("pk", "result").iterator():
        largest = busbw_at_largest((job.result or {}).get("rows") or [])
        BenchmarkJob.objects.filter(pk=job.pk).update(peak_busbw=largest and largest["out_of_place"])


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0002_cancel_any_benchmark_permission"),
    ]

    operations = [
        migrations.AlterField(
            model_name="benchmarkjob",
            name="peak_busbw",
            field=models.FloatField(blank=True, help_text="GB/s, out-of-place busbw at the largest message size",
                                    null=True),
        ),
        migrations.RunPython(out_of_place, migrations.RunPython.noop),
    ]
