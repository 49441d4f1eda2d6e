"""The task a GPU node's worker runs for a GPU check run launched from the dashboard: the node's
`python -m workers.healthcheck`, its report on the node's own events stream of the run
(gpulse/gpu_check_report.py).

The healthcheck runs as a process of its own, as Slurm runs it: its CUDA context ends with it, and one
stuck in a CUDA call is killed at the run's limit. With GPULSE_GPU_TEST_RECORD set (the path the node's
collector reads with --gpu-test-record) it writes the per-GPU results there, so a GPU that failed is
failing in the dashboard's health until a later run passes it. A simulated node of the demo has no GPU
to read: it runs the CPU counterparts of the tests (--cpu-only).
"""

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable

from gpulse import job_events
from gpulse.celery_contract import GPU_CHECKS_TASK, is_simulated
from gpulse.gpu_check_report import FULL_TIMEOUT_S, run_id_of, timeout_s
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from workers.celery_app import app
from workers.errors import LINE_CHARS
from workers.redis_client import redis_client

log = logging.getLogger(__name__)

RECORD_VARIABLE = "GPULSE_GPU_TEST_RECORD"
CANCEL_POLL_S = 0.5


def healthcheck_command(node: str, quick: bool) -> list[str]:
    command = [sys.executable, "-m", "workers.healthcheck", "--json"]
    if quick:
        command.append("--quick")
    if is_simulated(node):
        command.append("--cpu-only")
    elif os.environ.get(RECORD_VARIABLE):
        command += ["--record", os.environ[RECORD_VARIABLE]]
    return command


def run_healthcheck(command: list[str], limit_s: float, cancelled: Callable[[], bool]) -> dict:
    """Run the healthcheck; return the node's share of the run: its status, reason and report."""
    deadline = time.monotonic() + limit_s
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as check:
        while True:
            try:
                out, _ = check.communicate(timeout=CANCEL_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if cancelled():
                    status, reason = JobStatus.CANCELLED, "cancelled while running"
                elif time.monotonic() > deadline:
                    status, reason = JobStatus.FAILED, f"still running at the run's {limit_s:g} s limit: killed"
                else:
                    continue
                check.kill()
                check.communicate()
                return {"status": status, "reason": reason, "report": None}
    last = (out.strip().splitlines() or [""])[-1]
    try:
        report = json.loads(last)
    except ValueError:
        report = None
    if check.returncode in (0, 1) and isinstance(report, dict):
        return {"status": JobStatus.SUCCEEDED, "reason": "", "report": report}
    # Exit 2: it could not check (no driver, no NVML), and its one line says why.
    why = last or f"it ended with exit status {check.returncode} and said nothing"
    return {"status": JobStatus.FAILED, "reason": why[:LINE_CHARS], "report": None}


@app.task(name=GPU_CHECKS_TASK, acks_late=True, time_limit=FULL_TIMEOUT_S + 120, soft_time_limit=FULL_TIMEOUT_S + 60)
def run_gpu_checks(run: str, node: str, quick: bool) -> str:
    """Check this node's GPUs for GPU check run ``run`` (its key) and report on the node's own stream of it."""
    if run_id_of(run) is None or not isinstance(node, str) or not isinstance(quick, bool):
        log.error("gpu checks with run %r, node %r, quick %r refused: not a run key, a node and a flag",
                  run, node, quick)
        return JobStatus.FAILED
    keys = Keys()
    client = redis_client()
    # A redelivery (the worker restarted before acknowledging) must not test the GPUs a second time.
    if not client.set(keys.job_claim(run, node), 1, nx=True, ex=job_events.EVENTS_TTL):
        log.warning("gpu checks %s on %s were already started; ignoring the redelivery", run, node)
        return "duplicate"
    job_events.emit(client, keys, run, {"kind": "started", "node": node}, node=node)
    cancel_key = keys.job_node_cancel(run, node)
    try:
        done = run_healthcheck(healthcheck_command(node, quick), timeout_s(quick),
                               lambda: bool(client.exists(cancel_key)))
    except OSError as exc:  # the interpreter could not be started: out of processes or memory
        done = {"status": JobStatus.FAILED, "reason": f"the healthcheck could not start: {exc}", "report": None}
    job_events.emit(client, keys, run, {"kind": "node_done", "node": node, **done}, node=node)
    return done["status"]
