"""Control-queue tasks: start a benchmark job on its nodes, and record how it ended."""

import logging

from django.utils import timezone

from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.outcome import decide, read_progress
from dashboard.benchmarks.rendezvous import choose_rendezvous
from dashboard.redis_client import redis_client
from gpulse.keys import Keys
from workers import job_events
from workers.celery_app import CONTROL_QUEUE, app, node_queue
from workers.heartbeat import workerless
from workers.job_status import JobStatus
from workers.report import avg_busbw
from workers.sweep_spec import Row

log = logging.getLogger(__name__)

# Nodes get this long past the job's own limit to report, since a node
# reports only after its ranks are stopped and cleaned up.
REPORT_GRACE_S = 30


def node_specs(job: BenchmarkJob, addr: str, port: int) -> list[dict]:
    """Return each node's SweepSpec, as the dict its task carries, in rank order."""
    return [job.sweep_spec(rank, addr, port).to_dict() for rank in range(len(job.nodes))]


def claim_and_dispatch(job_id: int) -> tuple[BenchmarkJob, bool]:
    """Move the job queued -> running by compare-and-set and send one task per node.

    Return the job and whether this call claimed it: a second call (a
    redelivered task) finds the job running already and sends nothing.
    """
    addr, port = choose_rendezvous(BenchmarkJob.objects.get(pk=job_id).nodes)
    claimed = BenchmarkJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started=timezone.now(), rendezvous=f"{addr}:{port}"
    )
    job = BenchmarkJob.objects.get(pk=job_id)
    if claimed:
        for node, spec in zip(job.nodes, node_specs(job, addr, port), strict=True):
            app.send_task("gpulse.benchmarks.run_node", args=[job.pk, node, spec], queue=node_queue(node))
    return job, bool(claimed)


@app.task(name="gpulse.benchmarks.start_job", queue=CONTROL_QUEUE, acks_late=True)
def start_job(job_id: int) -> str:
    """Start the job on its nodes and return: no control thread waits for a run.

    The nodes report on the job's events stream and each sends `node_reported`;
    the reaper (dashboard/benchmarks/reaper.py) ends the jobs whose reports
    never come, so a control worker that dies mid-job loses nothing.
    """
    job, _claimed = claim_and_dispatch(job_id)
    return job.status


@app.task(name="gpulse.benchmarks.node_reported", queue=CONTROL_QUEUE, acks_late=True)
def node_reported(job_id: int) -> str:
    """A node of the job has reported: end the job if its reports say how it ended."""
    job = BenchmarkJob.objects.get(pk=job_id)
    if job.status == JobStatus.RUNNING:
        settle(job)
    return job.status


def settle(job: BenchmarkJob) -> None:
    """End the running job if its events and its nodes' heartbeats say how it ended.

    Idempotent: every end is a compare-and-set from running, so a node_reported
    task and the reaper of any control worker may settle the same job at once.
    """
    client = redis_client()
    keys = Keys()
    progress = read_progress(job_events.history(client, keys, job.pk))
    seconds, micros = client.time()  # the clock that stamped the stream's entries
    now_ms = seconds * 1000 + micros // 1000
    deadline_ms = int((job.started.timestamp() + job.timeout_seconds + REPORT_GRACE_S) * 1000)
    outcome = decide(job.nodes, progress, set(workerless(client, keys, job.nodes)), now_ms, deadline_ms,
                     job.timeout_seconds)
    if outcome is None:
        return
    if outcome.status == JobStatus.SUCCEEDED:
        record(job, progress.reports)
    else:
        finish(job, outcome.status, outcome.reason)


def record(job: BenchmarkJob, reports: dict) -> str:
    """End the job as succeeded with node 0's rows."""
    head = next(r for r in reports.values() if r["node_rank"] == 0)["result"]
    rows = head["rows"]
    largest = max((r["size"] for r in rows), default=None)
    return finish(job, JobStatus.SUCCEEDED, "", result={
        "world_size": len(job.nodes) * job.ranks_per_node,
        "rows": rows,
        "versions": {r["node"]: r["result"]["versions"] for r in reports.values()},
        "backend": head["spec"]["backend"],
    }, avg_busbw=avg_busbw([Row(**r) for r in rows]) if rows else None,
        peak_busbw=max((r["busbw"] for r in rows if r["size"] == largest), default=None))


def finish(job: BenchmarkJob, status: str, reason: str, **result) -> str:
    """Record the end once (compare-and-set from running, with its result fields),
    tell every node and browser, and return the job's status, which an earlier
    end may have set."""
    ended = BenchmarkJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        status=status, reason=reason, finished=timezone.now(), **result
    )
    client = redis_client()
    keys = Keys()
    # Stop ranks that may still run on other nodes (a peer failed, or time ran out).
    client.set(keys.job_cancel(job.pk), 1, ex=job_events.EVENTS_TTL)
    if ended:
        job_events.emit(client, keys, job.pk, {"kind": "final", "status": status, "reason": reason})
        log.info("benchmark job %s %s %s", job.pk, status, reason)
    job.refresh_from_db()
    return job.status
