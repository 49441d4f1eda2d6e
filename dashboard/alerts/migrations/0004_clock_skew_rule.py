"""The node.clock_skew metric, and its default rule on every install (like 0002's rules)."""

from django.db import migrations, models

CLOCK_SKEW_RULE = dict(name="Node clock skewed", metric="node.clock_skew", comparison="==", threshold=1,
                       for_seconds=300, severity="warning")


def create(apps, schema_editor):
    Rule = apps.get_model("alerts", "Rule")
    Rule.objects.get_or_create(name=CLOCK_SKEW_RULE["name"], defaults=CLOCK_SKEW_RULE)


def remove(apps, schema_editor):
    apps.get_model("alerts", "Rule").objects.filter(name=CLOCK_SKEW_RULE["name"]).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0003_delivery_gave_up")]

    operations = [
        migrations.AlterField(
            model_name="rule",
            name="metric",
            field=models.CharField(
                choices=[
                    ("gpu.util", "GPU utilization (%)"),
                    ("gpu.temp", "GPU temperature (°C)"),
                    ("gpu.power", "GPU power draw (W)"),
                    ("gpu.mem_used_pct", "GPU memory used (%)"),
                    ("gpu.ecc_uncorrected", "uncorrected ECC errors"),
                    ("gpu.xid", "XID error code (0 = none)"),
                    ("gpu.lost", "GPU lost / fallen off the bus (1 = lost)"),
                    ("gpu.throttle", "throttle reason present (1 = present)"),
                    ("node.down", "node down: latest sample expired (1 = down)"),
                    ("node.stale", "node stale or down (1 = stale)"),
                    ("node.clock_skew", "node's clock off by more than GPULSE_MAX_CLOCK_SKEW (1 = off)"),
                    ("probe.busbw", "NCCL probe bus bandwidth (GB/s)"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(create, remove),
    ]
