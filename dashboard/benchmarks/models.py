from django.conf import settings
from django.db import models
from django.db.models import Count, Q


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


class BenchmarkJobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(status__in=ACTIVE)

    def active_counts(self) -> dict:
        counts = self.aggregate(
            queued=Count("id", filter=Q(status=JobStatus.QUEUED)),
            running=Count("id", filter=Q(status=JobStatus.RUNNING)),
        )
        return counts


class BenchmarkJob(models.Model):
    """One all-reduce sweep over a set of nodes, from launch to its result."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    reason = models.TextField(blank=True, help_text="why the job failed, timed out or was cancelled")

    nodes = models.JSONField(help_text="node names, rank order")
    ranks_per_node = models.PositiveSmallIntegerField()
    backend = models.CharField(max_length=8, default="auto")
    dtype = models.CharField(max_length=16, default="float32")
    min_bytes = models.BigIntegerField()
    max_bytes = models.BigIntegerField()
    step_factor = models.PositiveSmallIntegerField(default=2)
    warmup_iters = models.PositiveSmallIntegerField(default=5)
    iters = models.PositiveSmallIntegerField(default=20)
    correctness_check = models.BooleanField(default=True)
    timeout_seconds = models.PositiveIntegerField(default=300)

    rendezvous = models.CharField(max_length=300, blank=True, help_text="address:port of the ranks' store")
    result = models.JSONField(null=True, blank=True, help_text="rows, world size, versions as the engine reports them")
    avg_busbw = models.FloatField(null=True, blank=True, help_text="GB/s, nccl-tests' '# Avg bus bandwidth'")
    peak_busbw = models.FloatField(null=True, blank=True, help_text="GB/s at the largest message size")

    objects = BenchmarkJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        permissions = [("launch_benchmark", "Can launch all-reduce benchmarks")]

    @property
    def duration(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None

    def __str__(self):
        return f"job {self.pk} {self.status} on {','.join(self.nodes)}"
