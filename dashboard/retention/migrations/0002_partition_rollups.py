"""PostgreSQL: the minute and hourly rollup tables partitioned by time (dashboard/retention/partitions.py).
Nothing on SQLite. No way back: a partitioned table's rows are kept, and nothing needs the plain one."""

from django.db import migrations
from django.utils import timezone

from dashboard.retention.partitions import PARTITIONED, partition_existing_table


def partition_rollups(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for spec in PARTITIONED:
            partition_existing_table(cursor, spec, timezone.now())


class Migration(migrations.Migration):
    dependencies = [
        ("retention", "0001_initial"),
        ("live", "0007_rollup_hours"),
    ]

    operations = [migrations.RunPython(partition_rollups, elidable=False)]
