from django.db import migrations, models


class Migration(migrations.Migration):
    """HealthChange moves here from the live app: its table and index stay as they are (state only)."""

    initial = True

    dependencies = [
        ("live", "0006_health_change_moves_to_health"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="HealthChange",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("node", models.CharField(max_length=128)),
                        ("at", models.DateTimeField()),
                        ("old", models.CharField(help_text="verdict before: healthy, degraded, failing or unknown",
                                                 max_length=16)),
                        ("new", models.CharField(max_length=16)),
                        ("reason", models.CharField(blank=True, help_text="the worst finding when the verdict changed",
                                                    max_length=400)),
                    ],
                    options={
                        "db_table": "live_healthchange",
                        "indexes": [models.Index(fields=["node", "-at"], name="live_health_node_2eaff6_idx")],
                    },
                ),
            ],
        ),
    ]
