from django.conf import settings
from django.db import models
from django.db.models import Count, Q

from workers.job_status import ACTIVE, JobStatus
from workers.sweep_spec import DTYPES, SweepSpec, sweep_sizes

LAUNCH_PERMISSION = "benchmarks.launch_benchmark"
CANCEL_ANY_PERMISSION = "benchmarks.cancel_any_benchmark"


def busbw_at_largest(rows: list[dict]) -> dict | None:
    """Return the one throughput figure every page quotes for a sweep, with its companion.

    ``{"size", "out_of_place", "in_place"}``: busbw (GB/s) at the largest
    message size, out-of-place first as nccl-tests prints it. Out-of-place is
    the figure shown, trended and compared (a page that showed the larger of
    the two, or the in-place one, disagreed with the compare page); in-place
    is shown beside it. None without rows; a placement not measured is None.
    """
    if not rows:
        return None
    largest = max(row["size"] for row in rows)
    at_largest = {row["inplace"]: row["busbw"] for row in rows if row["size"] == largest}
    return {"size": largest, "out_of_place": at_largest.get(False), "in_place": at_largest.get(True)}


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
    status = models.CharField(
        max_length=16, choices=[(status.value, status.label) for status in JobStatus], default=JobStatus.QUEUED
    )
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
    peak_busbw = models.FloatField(null=True, blank=True,
                                   help_text="GB/s, out-of-place busbw at the largest message size")

    objects = BenchmarkJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        permissions = [
            ("launch_benchmark", "Can launch all-reduce benchmarks"),
            ("cancel_any_benchmark", "Can cancel benchmarks launched by others"),
        ]

    @property
    def duration(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None

    @property
    def size_count(self) -> int:
        """How many message sizes the sweep measures (each out-of-place, then in-place)."""
        return len(sweep_sizes(self.min_bytes, self.max_bytes, self.step_factor, DTYPES[self.dtype].itemsize))

    @property
    def busbw_largest(self) -> dict | None:
        """The job's throughput figure from its result's rows (busbw_at_largest), None until it has one."""
        return busbw_at_largest((self.result or {}).get("rows") or [])

    @property
    def backend_ran(self) -> str | None:
        """The backend the ranks used (`auto` resolved on the nodes), once the job has a result."""
        return (self.result or {}).get("backend")

    def sweep_spec(self, node_rank: int = 0, master_addr: str = "127.0.0.1", master_port: int = 1) -> SweepSpec:
        """Return node node_rank's share of this job; raises SpecError if a value is invalid.

        Before the rendezvous is chosen (validating a launch, printing a
        header) the default port 1 stands in: a multi-node spec needs one.
        """
        return SweepSpec(
            backend=self.backend, dtype=self.dtype, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            factor=self.step_factor, warmup=self.warmup_iters, iters=self.iters, check=self.correctness_check,
            nnodes=len(self.nodes), node_rank=node_rank, ranks_per_node=self.ranks_per_node,
            master_addr=master_addr, master_port=master_port, timeout=float(self.timeout_seconds),
        )

    def may_be_cancelled_by(self, user) -> bool:
        """Whether user may cancel this job: its launcher, or a holder of cancel_any_benchmark."""
        launched_it = self.created_by_id is not None and self.created_by_id == user.pk
        return launched_it or user.has_perm(CANCEL_ANY_PERMISSION)

    def __str__(self):
        return f"job {self.pk} {self.status} on {','.join(self.nodes)}"
