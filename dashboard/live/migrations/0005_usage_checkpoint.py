from django.db import migrations, models
from django.db.models import F


def usage_as_far_as_rollups(apps, schema_editor):
    # Until now the usage was written in the rollups' transactions: it is as far as they are.
    apps.get_model("live", "RollupCheckpoint").objects.update(
        usage_entry_ms=F("entry_ms"), usage_entry_seq=F("entry_seq"))


class Migration(migrations.Migration):

    dependencies = [
        ('live', '0004_usage'),
    ]

    operations = [
        migrations.AddField(
            model_name='rollupcheckpoint',
            name='usage_entry_ms',
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='rollupcheckpoint',
            name='usage_entry_seq',
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunPython(usage_as_far_as_rollups, migrations.RunPython.noop),
    ]
