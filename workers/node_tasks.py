"""Tasks a GPU node's worker runs: its ranks of a benchmark job. No database."""

import logging
import os

from gpulse import job_events
from gpulse.celery_contract import BENCHMARK_HARD_LIMIT, RUN_NODE_TASK
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from gpulse.sweep_spec import DEFAULT_MAX_BYTES, Limits, SpecError, SweepSpec
from workers.celery_app import app
from workers.errors import in_a_line
from workers.launcher import run_node
from workers.redis_client import redis_client

log = logging.getLogger(__name__)


def node_limits() -> Limits:
    """The launch form's bounds, with this node's cap on message size (GPULSE_BENCHMARK_MAX_BYTES,
    as the control host's; the same default)."""
    try:
        cap = int(float(os.environ.get("GPULSE_BENCHMARK_MAX_BYTES", DEFAULT_MAX_BYTES)))
    except ValueError:
        cap = DEFAULT_MAX_BYTES
    return Limits(max_bytes=cap)


@app.task(
    name=RUN_NODE_TASK,
    acks_late=True,
    time_limit=BENCHMARK_HARD_LIMIT,
    soft_time_limit=BENCHMARK_HARD_LIMIT - 60,
)
def run_benchmark_node(job_id: int, node: str, spec: dict) -> str:
    """Run this node's ranks of job ``job_id`` and report on the node's own events stream of the job.

    The control side's reaper reads that stream: the task sends no message to
    the control host (its ACL user could not), and a spec past the launch
    form's bounds is refused, reported as a failed node_done.
    """
    keys = Keys()
    client = redis_client()
    if not isinstance(node, str) or not isinstance(job_id, int) or isinstance(job_id, bool):
        log.error("run_node with job %r, node %r refused: not a job id and a node name", job_id, node)
        return JobStatus.FAILED
    # A redelivered task (worker restarted before acknowledging) must not start
    # a second copy of the same ranks: the first delivery claims the node.
    if not client.set(keys.job_claim(job_id, node), 1, nx=True, ex=job_events.EVENTS_TTL):
        log.warning("job %s on %s was already started; ignoring the redelivery", job_id, node)
        return "duplicate"
    # Tells the control side this node is not silent, only slow, should it never report.
    job_events.emit(client, keys, job_id, {"kind": "started", "node": node}, node=node)
    cancel_key = keys.job_node_cancel(job_id, node)

    def on_row(row):
        job_events.emit(client, keys, job_id, {"kind": "row", "row": row.to_dict()}, node=node)

    node_rank = spec.get("node_rank") if isinstance(spec, dict) else None
    try:
        sweep = SweepSpec.from_dict(spec, node_limits())
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
    job_events.emit(client, keys, job_id, {"kind": "node_done", "node": node, "node_rank": node_rank, **report},
                    node=node)
    # The control side's reaper records the job once every node has reported
    # (it reads the node streams about every second); no control thread waits for it.
    return status
