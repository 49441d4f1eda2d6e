from django.db import models

# GPU readings kept as minute rollups: (min, mean, max) of each.
ROLLUP_METRICS = ("util", "temp", "power", "mem_used")


class GpuRollup(models.Model):
    """One GPU's readings over one minute, written in bulk by ingest."""

    node = models.CharField(max_length=128)
    gpu = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="start of the minute (UTC)")
    samples = models.PositiveIntegerField()
    util_min = models.FloatField(null=True)
    util_mean = models.FloatField(null=True)
    util_max = models.FloatField(null=True)
    temp_min = models.FloatField(null=True)
    temp_mean = models.FloatField(null=True)
    temp_max = models.FloatField(null=True)
    power_min = models.FloatField(null=True)
    power_mean = models.FloatField(null=True)
    power_max = models.FloatField(null=True)
    mem_used_min = models.FloatField(null=True)
    mem_used_mean = models.FloatField(null=True)
    mem_used_max = models.FloatField(null=True)

    class Meta:
        indexes = [models.Index(fields=["node", "minute"])]
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "minute"], name="one_rollup_per_gpu_minute")]
