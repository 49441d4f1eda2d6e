"""Validate a launch request (form or API) and queue the job, or say why not."""

import datetime as dt
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from dashboard.benchmarks.holders import held_nodes, holders
from dashboard.benchmarks.models import BenchmarkJob, GpuCheckRun
from dashboard.benchmarks.tasks import finish, start_job
from dashboard.live.cluster import read_cluster
from dashboard.redis_client import redis_client
from gpulse.heartbeat import TTL_S as HEARTBEAT_TTL_S
from gpulse.heartbeat import workerless
from gpulse.job_status import ACTIVE, JobStatus
from gpulse.keys import Keys
from gpulse.status import DOWN
from gpulse.sweep_spec import (
    BACKENDS,
    DEFAULT_OP,
    DTYPES,
    MAX_FACTOR,
    MAX_ITERS,
    MAX_RANKS_PER_NODE,
    MAX_TIMEOUT_S,
    MAX_WARMUP,
    MIN_TIMEOUT_S,
    OPS,
    SpecError,
    format_size,
    parse_size,
)

# The job's limit must end before Celery's hard limit kills its tasks (gpulse/celery_contract.py);
# the node side checks a spec against the same bounds (gpulse/sweep_spec.py).
MAX_TIMEOUT = MAX_TIMEOUT_S


class SizeField(forms.CharField):
    """A message size such as "16M", at most GPULSE_BENCHMARK_MAX_BYTES."""

    def to_python(self, value):
        value = super().to_python(value)
        try:
            return parse_size(value)
        except SpecError as exc:
            raise forms.ValidationError(str(exc)) from None

    def validate(self, value):
        super().validate(value)
        # Every rank allocates buffers of the largest size: past the cap a
        # node runs out of memory (and past 2^63 the database cannot store it).
        cap = settings.GPULSE_BENCHMARK_MAX_BYTES
        if value > cap:
            raise forms.ValidationError(
                f"{format_size(value)} is over this site's limit of {format_size(cap)} per message"
                " (GPULSE_BENCHMARK_MAX_BYTES): every rank holds buffers of the largest size")


class NodesForm(forms.Form):
    """The nodes a launch runs on (the picker), and the question about nodes a job holds: shared by a
    benchmark's launch and a fabric sweep's."""

    nodes = forms.MultipleChoiceField(help_text="ranks are numbered in the order the nodes are listed: node 0 holds"
                                                " ranks 0 … ranks per node − 1 and hosts the rendezvous")
    confirm_held = forms.BooleanField(
        required=False, label="Launch onto nodes a job holds",
        help_text="the benchmark then shares their GPUs with that work: it slows the job and measures less")

    def __init__(self, *args, cluster: list[dict] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cluster = {n["node"]: n for n in (cluster if cluster is not None else read_cluster())}
        # A node a sample or two late (stale, as on a loaded control host) can still run a job: its
        # worker's heartbeat decides that (launch()). A down one is not offered.
        self.fields["nodes"].choices = [(name, name) for name, n in self.cluster.items() if n["status"] != DOWN]
        self.held: dict[str, str] = {}  # the chosen nodes someone holds, with who, once the form is valid

    def clean_nodes(self):
        nodes = self.cleaned_data["nodes"]
        twice = sorted({name for name in nodes if nodes.count(name) > 1})
        if twice:
            verb = "is" if len(twice) == 1 else "are"
            raise forms.ValidationError(f"{', '.join(twice)} {verb} listed twice: each node takes part once")
        return nodes

    def clean(self):
        data = super().clean()
        confirmed = data.pop("confirm_held", False)  # a question to the person, not part of the job
        if self.errors:
            return data
        self.held = held_nodes(self.cluster, data["nodes"])
        if self.held and not confirmed:
            who = "; ".join(f"{name}: {holder}" for name, holder in self.held.items())
            self.add_error("confirm_held", f"a job holds GPUs of the chosen nodes ({who}): choose other nodes,"
                                           " or confirm launching onto them (the box under the nodes;"
                                           " confirm_held in the API)")
        return data


class LaunchForm(NodesForm):
    field_order = ["op", "nodes"]
    # Not required: a request that names no operation (a script written before there was a choice) measures
    # the all-reduce it always did.
    op = forms.ChoiceField(choices=[(name, name) for name in OPS], initial=DEFAULT_OP, required=False,
                           label="Operation",
                           help_text="the collective to measure, as nccl-tests' binary of that name measures it")
    ranks_per_node = forms.IntegerField(min_value=1, max_value=MAX_RANKS_PER_NODE, required=False,
                                        help_text="blank: one per GPU")
    backend = forms.ChoiceField(choices=[(b, b) for b in BACKENDS], initial="auto")
    dtype = forms.ChoiceField(choices=[(d, d) for d in DTYPES], initial="float32")
    min_bytes = SizeField(initial="1K")
    max_bytes = SizeField(initial="64M")
    step_factor = forms.IntegerField(min_value=2, max_value=MAX_FACTOR, initial=2)
    warmup_iters = forms.IntegerField(min_value=0, max_value=MAX_WARMUP, initial=5)
    iters = forms.IntegerField(min_value=1, max_value=MAX_ITERS, initial=20)
    correctness_check = forms.BooleanField(required=False, initial=True, label="Check results (#wrong)")
    timeout_seconds = forms.IntegerField(min_value=MIN_TIMEOUT_S, max_value=MAX_TIMEOUT, initial=300)

    def clean_op(self):
        return self.cleaned_data["op"] or DEFAULT_OP

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if not data.get("ranks_per_node"):
            gpus = min(len(self.cluster[name]["gpus"]) for name in data["nodes"])
            data["ranks_per_node"] = max(gpus, 1)
        try:
            BenchmarkJob(**data).sweep_spec().sizes()
        except SpecError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data

    @staticmethod
    def initial_from(job: BenchmarkJob) -> dict:
        """Return the form's values that would launch ``job`` again."""
        return {
            "op": job.op, "nodes": job.nodes, "ranks_per_node": job.ranks_per_node, "backend": job.backend,
            "dtype": job.dtype,
            "min_bytes": format_size(job.min_bytes), "max_bytes": format_size(job.max_bytes),
            "step_factor": job.step_factor, "warmup_iters": job.warmup_iters, "iters": job.iters,
            "correctness_check": job.correctness_check, "timeout_seconds": job.timeout_seconds,
        }


@dataclass
class NodeChoice:
    """One node of the launch form's picker."""

    name: str
    gpus: int
    reason: str  # why it cannot take a job now ("no worker", "running job 12"); empty when it can
    checked: bool
    held_by: list[str]  # who holds its GPUs now, most GPUs first (holders.holders()); empty when nobody does


def busy_nodes() -> dict[str, str]:
    """Return each node that a queued or running job or GPU check run holds, with which ("job 12")."""
    busy = {node: f"GPU check run {run.pk}" for run in GpuCheckRun.objects.filter(status__in=ACTIVE)
            for node in run.nodes}
    return {**busy, **{node: f"job {job.pk}" for job in BenchmarkJob.objects.active() for node in job.nodes}}


def node_picker(form: LaunchForm) -> list[NodeChoice]:
    """Return the form's nodes, each with why it cannot take a job now, the ticked ones first in their order.

    The browser submits ticked boxes in page order, which becomes the job's
    rank order: listing a submitted (or run-again) choice first in its own
    order keeps that order when the form is sent again. launch() checks the
    same conditions again, so a disabled box forged back in is refused there.
    """
    names = [name for name, _label in form.fields["nodes"].choices]
    busy = busy_nodes()
    absent = set(workerless(redis_client(), Keys(), names))
    wanted = [name for name in form["nodes"].value() or [] if name in names]

    def choice(name: str) -> NodeChoice:
        reason = f"running {busy[name]}" if name in busy else "no worker" if name in absent else ""
        gpus = form.cluster[name]["gpus"]
        return NodeChoice(name, len(gpus), reason, name in wanted and not reason, holders(gpus))

    # A stable sort: the others keep the cluster's order, by name.
    return sorted(map(choice, names), key=lambda c: wanted.index(c.name) if c.checked else len(wanted))


@dataclass
class Refusal:
    status: int
    message: str
    retry_after: int | None = None
    field: str | None = None  # the form field it is about, None for the whole request


def rate_limit() -> tuple[int, int]:
    count, seconds = settings.GPULSE_BENCHMARK_RATE.split("/")
    return int(count), int(seconds)


def rate_refusal(runs: QuerySet, user, what: str) -> Refusal | None:
    """429 when ``user`` launched GPULSE_BENCHMARK_RATE of ``runs`` (the jobs, or the GPU check runs) already;
    None for a user under it, or for None (an operator's shell on the control host)."""
    allowed, window = rate_limit()
    now = timezone.now()
    recent = runs.filter(created_by=user, created__gte=now - dt.timedelta(seconds=window))
    if user is None or recent.count() < allowed:
        return None
    oldest = recent.order_by("created").first().created
    wait = int((oldest + dt.timedelta(seconds=window) - now).total_seconds()) + 1
    return Refusal(429, f"at most {allowed} {what} per {window} s per user; try again in {wait} s", wait)


def launch(user, data: dict, rate_limited: bool = True) -> BenchmarkJob | Refusal:
    """Create and queue the job, or refuse: 409 when nodes are busy or have no
    benchmark worker, 429 past the rate.

    ``user`` None is an operator's shell on the control host: no rate limit;
    nor for ``rate_limited`` False, the pair jobs of a fabric sweep the user
    launched once (dashboard/benchmarks/sweeps.py).
    """
    with transaction.atomic():
        refused = rate_refusal(BenchmarkJob.objects.all(), user, "benchmarks") if rate_limited else None
        if refused is not None:
            return refused
        busy = sorted(busy_nodes().keys() & set(data["nodes"]))
        if busy:
            return Refusal(409, f"{', '.join(busy)} already run a benchmark or GPU checks; wait for it to finish or "
                                f"cancel it",
                           field="nodes")
        # Its task would wait in a queue nobody reads until the job's time limit.
        absent = workerless(redis_client(), Keys(), data["nodes"])
        if absent:
            return Refusal(409, f"no benchmark worker on {', '.join(absent)}: none has sent a heartbeat in the"
                                f" last {HEARTBEAT_TTL_S} s (is its node worker running?)", field="nodes")
        job = BenchmarkJob.objects.create(created_by=user, **data)
    transaction.on_commit(lambda: start_job.delay(job.pk))
    return job


def cancel(job: BenchmarkJob) -> bool:
    """Cancel a queued or running job; return False if it had already ended."""
    now = timezone.now()
    if BenchmarkJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, reason="cancelled before it started", finished=now
    ):
        return True
    if not BenchmarkJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).exists():
        return False
    return finish(job, JobStatus.CANCELLED, "cancelled while running") == JobStatus.CANCELLED
