"""Control-queue tasks: start a benchmark job on its nodes, watch it, record the result."""

import logging
import time

from django.utils import timezone

from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.rendezvous import choose_rendezvous
from dashboard.redis_client import redis_client
from gpulse.keys import Keys
from workers import job_events
from workers.celery_app import BENCHMARK_HARD_LIMIT, CONTROL_QUEUE, app, node_queue
from workers.job_status import JobStatus
from workers.report import avg_busbw
from workers.sweep_spec import Row

log = logging.getLogger(__name__)

# The watcher gives nodes this long past the job's own limit to report, since
# a node reports only after its ranks are stopped and cleaned up.
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
        for node, spec in zip(job.nodes, node_specs(job, addr, port)):
            app.send_task("gpulse.benchmarks.run_node", args=[job.pk, node, spec], queue=node_queue(node))
    return job, bool(claimed)


@app.task(name="gpulse.benchmarks.start_job", queue=CONTROL_QUEUE, acks_late=True, time_limit=BENCHMARK_HARD_LIMIT)
def start_job(job_id: int) -> str:
    """Start the job on its nodes, then watch it to the end.

    A redelivered copy only resumes watching, so a lost control worker never
    leaves a job running forever.
    """
    job, _claimed = claim_and_dispatch(job_id)
    if job.status != JobStatus.RUNNING:
        return job.status
    return watch(job)


def watch(job: BenchmarkJob) -> str:
    client = redis_client()
    keys = Keys()
    deadline = job.started.timestamp() + job.timeout_seconds + REPORT_GRACE_S
    reports: dict[str, dict] = {}
    after = "0-0"
    while time.time() < deadline:
        job.refresh_from_db(fields=["status"])
        if job.status != JobStatus.RUNNING:  # cancelled from the UI or the API
            return job.status
        for entry_id, event in job_events.read(client, keys, job.pk, after, block_ms=500):
            after = entry_id
            if event["kind"] == "node_done":
                reports[event["node"]] = event
        failed = [r for r in reports.values() if r["status"] != JobStatus.SUCCEEDED]
        if failed or len(reports) == len(job.nodes):
            return record(job, reports, failed)
    missing = sorted(set(job.nodes) - set(reports))
    return finish(job, JobStatus.TIMED_OUT, f"no report from {', '.join(missing)} within the job's {job.timeout_seconds} s limit")


def record(job: BenchmarkJob, reports: dict, failed: list) -> str:
    if failed:
        # The node that failed first names the cause; a rank that lost its peer says less.
        first = failed[0]
        status = JobStatus.TIMED_OUT if first["status"] == JobStatus.TIMED_OUT else JobStatus.FAILED
        reason = f"{first['node']}: {first['reason']}"
        silent = sorted(set(job.nodes) - set(reports))
        if silent:
            reason += f" (no report from {', '.join(silent)}: its worker may be down)"
        return finish(job, status, reason)
    head = next(r for r in reports.values() if r["node_rank"] == 0)["result"]
    rows = head["rows"]
    job.result = {
        "world_size": len(job.nodes) * job.ranks_per_node,
        "rows": rows,
        "versions": {r["node"]: r["result"]["versions"] for r in reports.values()},
        "backend": head["spec"]["backend"],
    }
    job.avg_busbw = avg_busbw([Row(**r) for r in rows]) if rows else None
    largest = max((r["size"] for r in rows), default=None)
    job.peak_busbw = max((r["busbw"] for r in rows if r["size"] == largest), default=None)
    job.save(update_fields=["result", "avg_busbw", "peak_busbw"])
    return finish(job, JobStatus.SUCCEEDED, "")


def finish(job: BenchmarkJob, status: str, reason: str) -> str:
    """Record the end once (compare-and-set from running), tell every node and
    browser, and return the job's status, which an earlier end may have set."""
    ended = BenchmarkJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        status=status, reason=reason, finished=timezone.now()
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
