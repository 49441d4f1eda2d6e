from django.db import migrations


class Migration(migrations.Migration):
    """HealthChange moves to the health app (dashboard/health/migrations/0001): its table stays (state only)."""

    dependencies = [
        ("live", "0005_usage_checkpoint"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="HealthChange")]),
    ]
