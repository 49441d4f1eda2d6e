from django.db import models

# GPU readings kept as minute rollups: (min, mean, max) of each, plus the (sum,
# count) the mean comes from, so partial minutes merge (dashboard/live/rollups.py).
ROLLUP_METRICS = ("util", "temp", "power", "mem_used")


class GpuRollup(models.Model):
    """One GPU's readings over one minute, merged in by ingest a few seconds at a time."""

    node = models.CharField(max_length=128)
    gpu = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="start of the minute (UTC)")
    samples = models.PositiveIntegerField()
    util_min = models.FloatField(null=True)
    util_mean = models.FloatField(null=True)
    util_max = models.FloatField(null=True)
    util_sum = models.FloatField(default=0.0)
    util_count = models.PositiveIntegerField(default=0, help_text="samples with a util reading")
    temp_min = models.FloatField(null=True)
    temp_mean = models.FloatField(null=True)
    temp_max = models.FloatField(null=True)
    temp_sum = models.FloatField(default=0.0)
    temp_count = models.PositiveIntegerField(default=0)
    power_min = models.FloatField(null=True)
    power_mean = models.FloatField(null=True)
    power_max = models.FloatField(null=True)
    power_sum = models.FloatField(default=0.0)
    power_count = models.PositiveIntegerField(default=0)
    mem_used_min = models.FloatField(null=True)
    mem_used_mean = models.FloatField(null=True)
    mem_used_max = models.FloatField(null=True)
    mem_used_sum = models.FloatField(default=0.0)
    mem_used_count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["node", "minute"])]
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "minute"], name="one_rollup_per_gpu_minute")]


class RollupCheckpoint(models.Model):
    """The newest stream entry folded into GpuRollup, per stream and consumer group.

    Written in the same transaction as the rollups it covers: an entry at or
    below it is already counted, whether or not its acknowledgement reached Redis.
    """

    stream = models.CharField(max_length=255, unique=True, help_text="'<stream key> <consumer group>'")
    entry_ms = models.BigIntegerField()
    entry_seq = models.BigIntegerField()


class HealthChange(models.Model):
    """A node's health verdict changed (dashboard/live/node_health.py): shown on the node page and by the API."""

    node = models.CharField(max_length=128)
    at = models.DateTimeField()
    old = models.CharField(max_length=16, help_text="verdict before: healthy, degraded, failing or unknown")
    new = models.CharField(max_length=16)
    reason = models.CharField(max_length=400, blank=True, help_text="the worst finding when the verdict changed")

    class Meta:
        indexes = [models.Index(fields=["node", "-at"])]
