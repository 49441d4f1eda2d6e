from django.conf import settings
from django.db import models
from django.db.models import Count, Q

from gpulse.gpu_check_report import run_key, timeout_s
from gpulse.job_status import ACTIVE, JobStatus
from gpulse.sweep_spec import DEFAULT_OP, OPS, SpecError, SweepSpec

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


def status_field(default: JobStatus) -> models.CharField:
    """A run's JobStatus, ``default`` when it is created (a job queues; a sweep runs from its launch)."""
    return models.CharField(
        max_length=16, choices=[(status.value, status.label) for status in JobStatus], default=default
    )


class Run(models.Model):
    """What a job and a fabric sweep both record: who launched it, when, when it started and ended."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def duration(self) -> float | None:
        """Seconds from its start to its end; None until it has both."""
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None

    def may_be_cancelled_by(self, user) -> bool:
        """Whether user may cancel it: its launcher, or a holder of cancel_any_benchmark."""
        launched_it = self.created_by_id is not None and self.created_by_id == user.pk
        return launched_it or user.has_perm(CANCEL_ANY_PERMISSION)


class BenchmarkJobQuerySet(models.QuerySet):
    def active(self):
        return self.filter(status__in=ACTIVE)

    def active_counts(self) -> dict:
        counts = self.aggregate(
            queued=Count("id", filter=Q(status=JobStatus.QUEUED)),
            running=Count("id", filter=Q(status=JobStatus.RUNNING)),
        )
        return counts


class BenchmarkJob(Run):
    """One collective sweep (an all-reduce unless another operation is chosen) over a set of nodes, from
    launch to its result."""

    status = status_field(JobStatus.QUEUED)
    reason = models.TextField(blank=True, help_text="why the job failed, timed out or was cancelled")

    op = models.CharField(max_length=16, choices=[(name, name) for name in OPS], default=DEFAULT_OP,
                          help_text="the collective measured, as nccl-tests names its binaries")
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

    # A pair job of a fabric sweep (FabricSweep), in the sweep's round ``sweep_round``; None for a job of its own.
    sweep = models.ForeignKey("FabricSweep", null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    sweep_round = models.PositiveSmallIntegerField(null=True, blank=True)

    rendezvous = models.CharField(max_length=300, blank=True, help_text="address:port of the ranks' store")
    result = models.JSONField(null=True, blank=True, help_text="rows, world size, versions as the engine reports them")
    avg_busbw = models.FloatField(null=True, blank=True, help_text="GB/s, nccl-tests' '# Avg bus bandwidth'")
    peak_busbw = models.FloatField(null=True, blank=True,
                                   help_text="GB/s, out-of-place busbw at the largest message size")

    objects = BenchmarkJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        permissions = [
            ("launch_benchmark", "Can launch collective benchmarks"),
            ("cancel_any_benchmark", "Can cancel benchmarks launched by others"),
        ]

    @property
    def size_count(self) -> int:
        """How many message sizes the sweep measures (each out-of-place, then in-place where the operation
        has an in-place form); 0 for a job whose values are invalid."""
        try:
            return len(self.sweep_spec().sizes())
        except SpecError:
            return 0

    @property
    def row_count(self) -> int:
        """How many rows a finished sweep has: a size's out-of-place and, where there is one, in-place row."""
        return self.size_count * (2 if OPS[self.op].in_place else 1)

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
            op=self.op, backend=self.backend, dtype=self.dtype, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            factor=self.step_factor, warmup=self.warmup_iters, iters=self.iters, check=self.correctness_check,
            nnodes=len(self.nodes), node_rank=node_rank, ranks_per_node=self.ranks_per_node,
            master_addr=master_addr, master_port=master_port, timeout=float(self.timeout_seconds),
        )

    def __str__(self):
        return f"job {self.pk} {self.status} on {','.join(self.nodes)}"


class FabricSweep(Run):
    """A diagnostic of the fabric between ``nodes`` in rounds of jobs (BenchmarkJob.sweep), one round after
    another (dashboard/benchmarks/sweeps.py); two kinds:

    - PAIRS: point-to-point bandwidth between every pair of nodes (a two-node sendrecv job each, one
      message size); ``rounds`` pairs every node at most once per round (N−1 rounds). Its result: the
      node × node matrix of busbw and what fell below ``flag_fraction`` of the median
      (dashboard/benchmarks/fabric.py).
    - BISECT: an all-reduce over each half of the nodes, then over each half of the slower half, and so
      on (dashboard/benchmarks/bisect.py): O(log N) jobs name the suspect nodes.
    """

    PAIRS, BISECT = "pairs", "bisect"
    KINDS = ((PAIRS, "every pair"), (BISECT, "bisection"))

    status = status_field(JobStatus.RUNNING)
    reason = models.TextField(blank=True)
    kind = models.CharField(max_length=8, choices=KINDS, default=PAIRS)
    nodes = models.JSONField(help_text="node names, as chosen")
    rounds = models.JSONField(help_text="[[[a, b], …], …]: the node sets of each round's jobs (a bisection's grow"
                                        " as it goes)")
    round = models.SmallIntegerField(default=-1, help_text="the round running now; -1 before the first")
    backend = models.CharField(max_length=8, default="auto")
    dtype = models.CharField(max_length=16, default="float32")
    size_bytes = models.BigIntegerField(help_text="the message size of every pair's sendrecv")
    warmup_iters = models.PositiveSmallIntegerField(default=5)
    iters = models.PositiveSmallIntegerField(default=20)
    timeout_seconds = models.PositiveIntegerField(default=120, help_text="each pair job's limit")
    flag_fraction = models.FloatField(default=0.7, help_text="a link or node below this fraction of the median")
    result = models.JSONField(null=True, blank=True, help_text="matrix, median, flagged links and nodes, failures")

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"fabric sweep {self.pk} {self.status} over {len(self.nodes)} nodes"


class GpuCheckRun(Run):
    """`python -m workers.healthcheck` run once on each of ``nodes`` by its node worker, launched from the
    pages or the API (dashboard/benchmarks/gpu_check_runs.py; the contract: gpulse/gpu_check_report.py).
    It succeeds when every node was judged, healthy or not; ``results`` says how each was."""

    status = status_field(JobStatus.QUEUED)
    reason = models.TextField(blank=True)
    nodes = models.JSONField(help_text="node names, as chosen")
    quick = models.BooleanField(default=True, help_text="the healthcheck's --quick: under 30 s a node")
    results = models.JSONField(default=dict, help_text="node -> {status, reason, report}, as each node reported")

    class Meta:
        ordering = ["-created"]

    @property
    def key(self) -> str:
        return run_key(self.pk)

    @property
    def timeout_seconds(self) -> int:
        return timeout_s(self.quick)

    def __str__(self):
        return f"GPU check run {self.pk} {self.status} on {','.join(self.nodes)}"
