"""Tasks a GPU node's worker runs: its ranks of a benchmark job. No database."""

import logging

from gpulse.keys import Keys
from workers import job_events
from workers.celery_app import BENCHMARK_HARD_LIMIT, CONTROL_QUEUE, app
from workers.errors import in_a_line
from workers.job_status import JobStatus
from workers.launcher import run_node
from workers.redis_client import redis_client
from workers.sweep_spec import SpecError, SweepSpec

log = logging.getLogger(__name__)


@app.task(
    name="gpulse.benchmarks.run_node",
    acks_late=True,
    time_limit=BENCHMARK_HARD_LIMIT,
    soft_time_limit=BENCHMARK_HARD_LIMIT - 60,
)
def run_benchmark_node(job_id: int, node: str, spec: dict) -> str:
    """Run this node's ranks of job ``job_id`` and report on its events stream."""
    keys = Keys()
    client = redis_client()
    # A redelivered task (worker restarted before acknowledging) must not start
    # a second copy of the same ranks: the first delivery claims the node.
    if not client.set(keys.job_claim(job_id, node), 1, nx=True, ex=job_events.EVENTS_TTL):
        log.warning("job %s on %s was already started; ignoring the redelivery", job_id, node)
        return "duplicate"
    # Tells the control side this node is not silent, only slow, should it never report.
    job_events.emit(client, keys, job_id, {"kind": "started", "node": node})
    cancel_key = keys.job_cancel(job_id)

    def on_row(row):
        job_events.emit(client, keys, job_id, {"kind": "row", "row": row.to_dict()})

    node_rank = spec.get("node_rank") if isinstance(spec, dict) else None
    try:
        sweep = SweepSpec.from_dict(spec)
        node_rank = sweep.node_rank
        result = run_node(
            sweep,
            on_row=on_row if sweep.node_rank == 0 else None,
            cancel=lambda: bool(client.exists(cancel_key)),
        )
    except Exception as exc:
        # Unreported, the control side would wait out the job's limit and then call this node silent.
        log.exception("job %s on %s: the task failed; reporting that as the node's outcome", job_id, node)
        status = JobStatus.FAILED
        why = in_a_line(exc, with_type=not isinstance(exc, SpecError))  # a SpecError's words are for people
        report = {"status": status, "reason": f"its benchmark worker could not run the job: {why}",
                  "crashed": False, "result": {"versions": {}}}
    else:
        status = result.status
        report = {"status": status, "reason": result.reason, "crashed": result.crashed,
                  "result": result.to_dict() if sweep.node_rank == 0 else {"versions": result.versions}}
    job_events.emit(client, keys, job_id, {"kind": "node_done", "node": node, "node_rank": node_rank, **report})
    # The control side records the job once every node has reported; no control
    # thread waits for it. Should this message be lost, its periodic reaper reads
    # the same events.
    app.send_task("gpulse.benchmarks.node_reported", args=[job_id], queue=CONTROL_QUEUE)
    return status
