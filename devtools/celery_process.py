"""Celery workers as child processes, started as production starts them: the system tests and
devtools.node_worker_check.

Each worker leads a process group of its own, so stopping it also stops what
its tasks started (a node worker's rank processes).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spawn_worker(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    """Start ``celery -A <args>`` as production runs it, its output in ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", *args, "--without-gossip", "--without-mingle", "-l", "INFO"],
        cwd=ROOT, env={**os.environ, **env},
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_ready(process: subprocess.Popen, log: Path, deadline: float) -> None:
    while b"ready." not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.stem} did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)


def stop_workers(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each worker's group (Celery's warm shutdown: a running task finishes), SIGKILL it after 10 s."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
