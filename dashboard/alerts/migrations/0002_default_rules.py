"""Rules every fresh install starts with, enabled."""

from django.db import migrations

DEFAULT_RULES = [
    dict(name="GPU temperature high", metric="gpu.temp", comparison=">", threshold=85, for_seconds=60, severity="warning"),
    dict(name="GPU XID error", metric="gpu.xid", comparison=">", threshold=0, for_seconds=0, severity="warning"),
    dict(name="GPU lost", metric="gpu.lost", comparison="==", threshold=1, for_seconds=0, severity="critical"),
    dict(name="GPU uncorrected ECC errors", metric="gpu.ecc_uncorrected", comparison=">", threshold=0, for_seconds=0, severity="critical"),
    dict(name="Node not reporting", metric="node.down", comparison="==", threshold=1, for_seconds=60, severity="critical"),
]


def create(apps, schema_editor):
    Rule = apps.get_model("alerts", "Rule")
    for fields in DEFAULT_RULES:
        Rule.objects.get_or_create(name=fields["name"], defaults=fields)


def remove(apps, schema_editor):
    Rule = apps.get_model("alerts", "Rule")
    Rule.objects.filter(name__in=[r["name"] for r in DEFAULT_RULES]).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]

    operations = [migrations.RunPython(create, remove)]
