from django.db import models

# GPU readings kept as minute rollups: (min, mean, max) of each, plus the (sum,
# count) the mean comes from, so partial minutes merge (dashboard/rollups/accumulator.py).
# The activity readings are ratios 0-1 as the sample has them (gpulse/schema.py ACTIVITY_METRICS);
# a GPU that does not report them has count 0 and null min, mean and max, never 0.
ROLLUP_METRICS = ("util", "temp", "power", "mem_used", "sm_active", "tensor_active", "dram_active")


class _RollupColumns(models.Model):
    """A GPU's readings over one time bucket: per metric of ROLLUP_METRICS, (min, mean, max) and the (sum, count)
    the mean comes from, so buckets merge by addition."""

    node = models.CharField(max_length=128)
    gpu = models.PositiveSmallIntegerField()
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
    sm_active_min = models.FloatField(null=True)
    sm_active_mean = models.FloatField(null=True)
    sm_active_max = models.FloatField(null=True)
    sm_active_sum = models.FloatField(default=0.0)
    sm_active_count = models.PositiveIntegerField(default=0, help_text="samples with an SM activity reading")
    tensor_active_min = models.FloatField(null=True)
    tensor_active_mean = models.FloatField(null=True)
    tensor_active_max = models.FloatField(null=True)
    tensor_active_sum = models.FloatField(default=0.0)
    tensor_active_count = models.PositiveIntegerField(default=0)
    dram_active_min = models.FloatField(null=True)
    dram_active_mean = models.FloatField(null=True)
    dram_active_max = models.FloatField(null=True)
    dram_active_sum = models.FloatField(default=0.0)
    dram_active_count = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class GpuRollup(_RollupColumns):
    """One GPU's readings over one minute, merged in by ingest a few seconds at a time."""

    minute = models.DateTimeField(help_text="start of the minute (UTC)")

    class Meta:
        # (minute): the retention pass reads an hour of every GPU at once, and prunes by age.
        indexes = [models.Index(fields=["node", "minute"]), models.Index(fields=["minute"])]
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "minute"], name="one_rollup_per_gpu_minute")]


class GpuRollupHour(_RollupColumns):
    """One GPU's readings over one hour, computed from its GpuRollup minutes (dashboard/retention/downsample.py):
    kept long after the minutes are pruned, for the node page's long ranges."""

    hour = models.DateTimeField(help_text="start of the hour (UTC)")

    class Meta:
        indexes = [models.Index(fields=["node", "hour"]), models.Index(fields=["hour"])]
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "hour"], name="one_rollup_per_gpu_hour")]


class RollupCheckpoint(models.Model):
    """The newest stream entry folded into GpuRollup, and into the usage tables, per stream and consumer group.

    Written in the same transaction as the rows it covers: an entry at or
    below it is already counted, whether or not its acknowledgement reached Redis.
    The usage is written less often than the rollups: its entry is at or behind theirs.
    """

    stream = models.CharField(max_length=255, unique=True, help_text="'<stream key> <consumer group>'")
    entry_ms = models.BigIntegerField()
    entry_seq = models.BigIntegerField()
    usage_entry_ms = models.BigIntegerField()
    usage_entry_seq = models.BigIntegerField()


# Usage accounting (dashboard/rollups/usage.py): seconds and energy summed, so parts of a
# minute or an hour merge by addition like the rollups. gpulse/usage.py says what the words mean.
USAGE_SUMS = ("samples", "seconds", "allocated_seconds", "busy_seconds", "sm_activity_seconds", "energy_j")


class _UsageSums(models.Model):
    samples = models.PositiveIntegerField()
    seconds = models.FloatField(help_text="GPU-seconds sampled: each sample counts its interval")
    allocated_seconds = models.FloatField(help_text="of those, allocated to a job, a pod or a process")
    busy_seconds = models.FloatField(help_text="of the allocated ones, busy: SM activity at or above GPULSE_BUSY_"
                                     "SM_ACTIVITY where reported, else utilization at or above GPULSE_BUSY_UTIL")
    energy_j = models.FloatField(help_text="joules: the energy counter's deltas, else power × interval")
    sm_activity_seconds = models.FloatField(default=0.0, help_text="of the allocated ones, those judged busy or "
                                            "idle by SM activity (the rest by utilization): the row's busy_by")

    class Meta:
        abstract = True


# A MIG instance's rows (gpulse.usage.mig_split): its seconds and energy are its share of the GPU's.
_MIG_PROFILE_HELP = "the MIG instance's profile (1g.10gb); '' for a whole GPU"


class GpuUsage(_UsageSums):
    """One GPU's usage over one minute, per owner (a GPU that changes hands within the minute has two rows).

    A GPU in MIG mode has a row per instance and owner, and one (mig_instance '') for the share of it
    that no instance holds, never allocated."""

    node = models.CharField(max_length=128)
    gpu = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="start of the minute (UTC)")
    user = models.CharField(max_length=128, blank=True)
    job = models.CharField(max_length=128, blank=True)
    pod = models.CharField(max_length=320, blank=True, help_text="namespace/name, else the pod UID")
    model = models.CharField(max_length=128, blank=True, help_text="the GPU's model name, for its price")
    mig_instance = models.CharField(max_length=16, blank=True, default="",
                                    help_text="the MIG instance: 'GPU instance/compute instance' ids ('1/0'), the "
                                    "GPU instance alone ('1') where the source gives no compute instance; '' for "
                                    "a whole GPU, and a MIG GPU's slices no instance holds")
    mig_profile = models.CharField(max_length=32, blank=True, default="", help_text=_MIG_PROFILE_HELP)

    class Meta:
        indexes = [models.Index(fields=["minute"])]
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "minute", "user", "job", "pod", "mig_instance"],
                                               name="one_usage_per_gpu_instance_minute_owner")]


class UsageHour(_UsageSums):
    """GpuUsage summed per hour, node, GPU model, owner and MIG profile: what the usage tables and the API read."""

    hour = models.DateTimeField(help_text="start of the hour (UTC)")
    node = models.CharField(max_length=128)
    model = models.CharField(max_length=128, blank=True)
    user = models.CharField(max_length=128, blank=True)
    job = models.CharField(max_length=128, blank=True)
    pod = models.CharField(max_length=320, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True, default="", help_text=_MIG_PROFILE_HELP)

    class Meta:
        indexes = [models.Index(fields=["hour"])]
        constraints = [models.UniqueConstraint(fields=["hour", "node", "model", "user", "job", "pod", "mig_profile"],
                                               name="one_usage_per_hour_node_owner_profile")]


class ClusterUsage(_UsageSums):
    """GpuUsage summed over the whole cluster per minute: the allocated-versus-busy chart."""

    minute = models.DateTimeField(unique=True)
