"""GPU check runs on the control host: launch one (the pages and the API), start it on its nodes, settle it
from what they report, cancel it.

Each node's worker runs `python -m workers.healthcheck` and reports on its own events stream of the run
(gpulse/gpu_check_report.py); the reaper (dashboard/benchmarks/reaper.py) settles every running run about
once a second from those streams and the nodes' worker heartbeats, as it settles benchmark jobs. A node's
report is kept as soon as it comes, so the run's page shows each node as it finishes.
"""

import logging
from dataclasses import dataclass

from django import forms
from django.db import transaction
from django.utils import timezone

from dashboard.benchmarks.launch import NodesForm, Refusal, busy_nodes, rate_refusal
from dashboard.benchmarks.models import GpuCheckRun
from dashboard.benchmarks.tasks import REPORT_GRACE_S, send_to_node
from dashboard.celery_app import app
from dashboard.redis_client import redis_client
from gpulse import job_events
from gpulse.celery_contract import CONTROL_QUEUE, GPU_CHECKS_TASK
from gpulse.gpu_check_report import HEALTHY, NODE_STATUSES, ReportError, clean_report
from gpulse.health import FAIL, WARN
from gpulse.heartbeat import TTL_S as HEARTBEAT_TTL_S
from gpulse.heartbeat import workerless
from gpulse.job_status import ACTIVE, JobStatus
from gpulse.keys import Keys

log = logging.getLogger(__name__)


class GpuCheckForm(NodesForm):
    quick = forms.BooleanField(required=False, initial=True, label="Quick",
                               help_text="the Slurm prolog's check, under 30 s a node; unticked, each GPU's tests "
                                         "run 25 times as long, as a burn-in")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["nodes"].help_text = "each node's worker checks the node's own GPUs"
        self.fields["confirm_held"].label = "Check nodes a job holds"
        self.fields["confirm_held"].help_text = ("the tests leave a GPU a process uses alone, and test one the job "
                                                 "holds but does not use yet")


def launch_gpu_checks(user, data: dict) -> GpuCheckRun | Refusal:
    """Create and queue the run, or refuse: 409 when a node is busy or has no worker, 429 past the rate."""
    with transaction.atomic():
        refused = rate_refusal(GpuCheckRun.objects.all(), user, "GPU check runs")
        if refused is not None:
            return refused
        busy = busy_nodes()
        if busy.keys() & set(data["nodes"]):
            # Its GPUs are measured already, or measuring: the numbers of both would be wrong.
            return Refusal(409, "; ".join(f"{node} runs {busy[node]}" for node in data["nodes"] if node in busy)
                           + ": wait for it to finish or cancel it", field="nodes")
        absent = workerless(redis_client(), Keys(), data["nodes"])
        if absent:
            return Refusal(409, f"no node worker on {', '.join(absent)}: none has sent a heartbeat in the"
                                f" last {HEARTBEAT_TTL_S} s (is its node worker running?)", field="nodes")
        run = GpuCheckRun.objects.create(created_by=user, nodes=data["nodes"], quick=data["quick"])
    transaction.on_commit(lambda: start_gpu_checks.delay(run.pk))
    return run


@app.task(name="gpulse.benchmarks.start_gpu_checks", queue=CONTROL_QUEUE, acks_late=True)
def start_gpu_checks(run_id: int) -> str:
    """Move the run queued -> running (compare-and-set: a redelivery sends nothing) and send each node its task."""
    claimed = GpuCheckRun.objects.filter(pk=run_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started=timezone.now())
    run = GpuCheckRun.objects.get(pk=run_id)
    if claimed:
        for node in run.nodes:
            send_to_node(node, GPU_CHECKS_TASK, [run.key, node, run.quick])
    return run.status


def node_result(event: dict) -> dict:
    """A node_done event as the run keeps it; one that is not as the contract says is the node's failure."""
    status, reason = event.get("status"), event.get("reason")
    if status not in NODE_STATUSES or not isinstance(reason, str):
        return {"status": JobStatus.FAILED, "reason": "its report was malformed: no final status and reason",
                "report": None}
    if status != JobStatus.SUCCEEDED:
        return {"status": status, "reason": reason[:500], "report": None}
    try:
        return {"status": status, "reason": "", "report": clean_report(event.get("report"))}
    except ReportError as exc:
        return {"status": JobStatus.FAILED, "reason": f"its report was malformed: {exc}", "report": None}


def settle_gpu_checks(run: GpuCheckRun) -> None:
    """Keep each node's new report; end the run once every node reported, its worker is gone, or time is up.

    One round trip: the run's node streams, the nodes' heartbeats and the Redis clock. Every end is a
    compare-and-set from running, so several reapers may settle the same run at once."""
    client, keys = redis_client(), Keys()
    sources = {keys.job_node_events(run.key, node): node for node in run.nodes}
    pipe = client.pipeline(transaction=False)
    for stream in sources:
        pipe.xrange(stream)
    for node in run.nodes:
        pipe.exists(keys.worker(node))
    pipe.time()
    *replies, (seconds, _micros) = pipe.execute()
    streams, alive = replies[:len(sources)], replies[len(sources):]
    results, started = dict(run.results), set()
    for entry in job_events.merge(sources, streams):  # only a node's own stream counts, as that node's
        if entry.event is None or entry.source in results:
            continue
        if entry.event["kind"] == "started":
            started.add(entry.source)
        elif entry.event["kind"] == "node_done":
            results[entry.source] = node_result(entry.event)
    for node, up in zip(run.nodes, alive, strict=True):
        if node not in results and not up:  # its task died with its worker: no report will ever come
            results[node] = {"status": JobStatus.FAILED, "report": None,
                             "reason": f"its node worker stopped {'during' if node in started else 'before'} the run"}
    assert run.started is not None  # running
    if seconds >= run.started.timestamp() + run.timeout_seconds + REPORT_GRACE_S:
        for node in run.nodes:
            results.setdefault(node, {"status": JobStatus.TIMED_OUT, "report": None,
                                      "reason": f"no report within the run's {run.timeout_seconds} s limit "
                                                f"({'still running' if node in started else 'never started'})"})
    if len(results) == len(run.nodes):
        status, reason = run_outcome(run.nodes, results)
        finish(run, status, reason, results)
    elif results != run.results:
        GpuCheckRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING).update(results=results)


def run_outcome(nodes: list[str], results: dict) -> tuple[str, str]:
    """The run's status and reason from its nodes': succeeded when every node was judged."""
    for status in (JobStatus.TIMED_OUT, JobStatus.FAILED, JobStatus.CANCELLED):
        these = [node for node in nodes if results[node]["status"] == status]
        if these:
            return status, "; ".join(f"{node}: {results[node]['reason']}" for node in these)
    return JobStatus.SUCCEEDED, ""


def finish(run: GpuCheckRun, status: str, reason: str, results: dict) -> bool:
    """End the run once (compare-and-set from running) and tell every node's task still running to stop;
    return whether this call ended it."""
    ended = GpuCheckRun.objects.filter(pk=run.pk, status=JobStatus.RUNNING).update(
        status=status, reason=reason, results=results, finished=timezone.now())
    keys = Keys()
    pipe = redis_client().pipeline(transaction=False)
    for node in run.nodes:
        if node not in results or results[node]["status"] != JobStatus.SUCCEEDED:
            pipe.set(keys.job_node_cancel(run.key, node), 1, ex=job_events.EVENTS_TTL)
    pipe.execute()
    if ended:
        log.info("GPU check run %s %s %s", run.pk, status, reason)
    return bool(ended)


def cancel_gpu_checks(run: GpuCheckRun, by: str) -> bool:
    """Cancel a queued or running run, keeping the nodes that reported; False if it had already ended."""
    reason = f"cancelled by {by}"
    if GpuCheckRun.objects.filter(pk=run.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED, reason=reason, finished=timezone.now()):
        return True
    run.refresh_from_db()
    if run.status != JobStatus.RUNNING:
        return False
    return finish(run, JobStatus.CANCELLED, reason, run.results)


@dataclass(frozen=True)
class NodeOutcome:
    """One node of a run as its page shows it."""

    node: str
    verdict: str  # healthy, unhealthy, could not check, timed out, cancelled, running, no report
    tone: str  # its colour, as a node health verdict's: healthy, failing, degraded or unknown
    reason: str
    problems: list[dict]  # the report's fail and warn findings
    tests: list[dict]


def node_outcomes(run: GpuCheckRun) -> list[NodeOutcome]:
    outcomes = []
    for node in run.nodes:
        result = run.results.get(node)
        if result is None:
            verdict = "running" if run.status in ACTIVE else "no report"
            outcomes.append(NodeOutcome(node, verdict, "unknown", "", [], []))
            continue
        report = result["report"]
        if report is None:
            verdict, tone = {JobStatus.TIMED_OUT: ("timed out", "degraded"),
                             JobStatus.CANCELLED: ("cancelled", "unknown")}.get(result["status"],
                                                                                ("could not check", "degraded"))
            outcomes.append(NodeOutcome(node, verdict, tone, result["reason"], [], []))
            continue
        problems = [finding for finding in report["findings"] if finding["status"] in (FAIL, WARN)]
        healthy = report["exit"] == HEALTHY
        outcomes.append(NodeOutcome(node, "healthy" if healthy else "unhealthy", "healthy" if healthy else "failing",
                                    "", problems, report["tests"]))
    return outcomes
