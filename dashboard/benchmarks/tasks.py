"""Control-queue tasks: start a benchmark job on its nodes, and record how it ended."""

import logging

from django.utils import timezone

from dashboard.benchmarks.models import BenchmarkJob, busbw_at_largest
from dashboard.benchmarks.outcome import decide, read_progress
from dashboard.benchmarks.rendezvous import choose_rendezvous
from dashboard.celery_app import app
from dashboard.redis_client import redis_client
from gpulse import job_events
from gpulse.celery_contract import CONTROL_QUEUE, RUN_NODE_TASK, node_broker, node_queue, node_transport_options
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from gpulse.sweep_spec import Row, avg_busbw

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
            send_to_node(node, RUN_NODE_TASK, [job.pk, node, spec])
    return job, bool(claimed)


def send_to_node(node: str, task: str, args: list) -> None:
    """Send a task onto the node's queue, in the node's own broker key space
    (gpulse/celery_contract.py): the only Celery keys its worker reaches."""
    options = node_transport_options(node_broker(node))
    with app.connection_for_write(transport_options=options) as connection:
        producer = app.amqp.Producer(connection)  # declares the queue, as .delay() does
        app.send_task(task, args=args, queue=node_queue(node), producer=producer)


@app.task(name="gpulse.benchmarks.start_job", queue=CONTROL_QUEUE, acks_late=True)
def start_job(job_id: int) -> str:
    """Start the job on its nodes and return: no control thread waits for a run.

    Each node reports on its own events stream of the job; the reaper
    (dashboard/benchmarks/reaper.py) reads them about every second and ends
    the job, so a control worker that dies mid-job loses nothing.
    """
    job, _claimed = claim_and_dispatch(job_id)
    return job.status


def settle(job: BenchmarkJob) -> None:
    """End the running job if its events and its nodes' heartbeats say how it ended.

    Idempotent: every end is a compare-and-set from running, so the reapers of
    several control workers may settle the same job at once. One round trip:
    the job's streams, its nodes' heartbeats and the Redis clock.
    """
    client = redis_client()
    keys = Keys()
    sources = job_events.streams(keys, job.pk, job.nodes)
    pipe = client.pipeline(transaction=False)
    for key in sources:
        pipe.xrange(key)
    for node in job.nodes:
        pipe.exists(keys.worker(node))
    pipe.time()  # the clock that stamped the streams' entries
    *replies, (seconds, micros) = pipe.execute()
    streams, alive = replies[:len(sources)], replies[len(sources):]
    progress = read_progress(job_events.merge(sources, streams), job.nodes, job.pk)
    now_ms = seconds * 1000 + micros // 1000
    deadline_ms = int((job.started.timestamp() + job.timeout_seconds + REPORT_GRACE_S) * 1000)
    workerless = {node for node, up in zip(job.nodes, alive, strict=True) if not up}
    outcome = decide(job.nodes, progress, workerless, now_ms, deadline_ms, job.timeout_seconds)
    if outcome is None:
        return
    if outcome.status == JobStatus.SUCCEEDED:
        record(job, progress.reports)
    else:
        finish(job, outcome.status, outcome.reason)


def record(job: BenchmarkJob, reports: dict) -> str:
    """End the job as succeeded with its first node's (rank 0's) rows, validated by read_progress."""
    head = reports[job.nodes[0]]["result"]
    rows = head["rows"]
    largest = busbw_at_largest(rows)
    return finish(job, JobStatus.SUCCEEDED, "", result={
        "world_size": len(job.nodes) * job.ranks_per_node,
        "rows": rows,
        "versions": {node: r["result"].get("versions", {}) for node, r in reports.items()},
        "backend": head["spec"]["backend"],
    }, avg_busbw=avg_busbw([Row(**r) for r in rows]) if rows else None,
        peak_busbw=largest and largest["out_of_place"])


def finish(job: BenchmarkJob, status: str, reason: str, **result) -> str:
    """Record the end once (compare-and-set from running, with its result fields),
    tell every node and browser, and return the job's status, which an earlier
    end may have set."""
    ended = BenchmarkJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        status=status, reason=reason, finished=timezone.now(), **result
    )
    client = redis_client()
    keys = Keys()
    # Stop ranks that may still run on other nodes (a peer failed, or time ran out):
    # each node's task polls its own flag, the only one its ACL user may read.
    pipe = client.pipeline(transaction=False)
    pipe.set(keys.job_cancel(job.pk), 1, ex=job_events.EVENTS_TTL)
    for node in job.nodes:
        pipe.set(keys.job_node_cancel(job.pk, node), 1, ex=job_events.EVENTS_TTL)
    pipe.execute()
    if ended:
        job_events.emit(client, keys, job.pk, {"kind": "final", "status": status, "reason": reason})
        log.info("benchmark job %s %s %s", job.pk, status, reason)
    job.refresh_from_db()
    return job.status
