"""Real Celery workers for tests: node workers as subprocesses (as on GPU
nodes, no database), the control and webhook workers in-process, each on its
own queue and pool as in production (they share the test DB)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from workers.celery_app import CONTROL_QUEUE, WEBHOOK_QUEUE, app, node_queue

ROOT = Path(__file__).resolve().parent.parent


class NodeWorkers:
    def __init__(self, redis_url: str, log_dir: Path):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, *nodes: str, timeout: float = 60) -> None:
        for node in nodes:
            log = self.log_dir / f"worker-{node}.log"
            self.processes[node] = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers.node_worker", "worker", "-Q", node_queue(node),
                 "-n", f"{node}@test", "--pool", "solo", "--without-gossip", "--without-mingle", "-l", "INFO"],
                cwd=ROOT, env={**os.environ, "REDIS_URL": self.redis_url},
                stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        for node in nodes:
            log = self.log_dir / f"worker-{node}.log"
            while b"ready." not in log.read_bytes():
                if self.processes[node].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"node worker {node} did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)

    def kill(self, node: str) -> None:
        """SIGKILL the worker's main process only, as a crashed node would die."""
        self.processes[node].send_signal(signal.SIGKILL)
        self.processes[node].wait()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def node_workers(redis_server, redis_client, tmp_path):
    workers = NodeWorkers(redis_server.url, tmp_path)
    yield workers
    workers.stop()


@contextmanager
def control_worker_running():
    app.conf.broker_url = os.environ["REDIS_URL"]
    import dashboard.alerts.tasks  # noqa: F401  (registers the control tasks)
    import dashboard.benchmarks.tasks  # noqa: F401

    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, queues=[CONTROL_QUEUE],
                      loglevel="WARNING", shutdown_timeout=30):
        yield


@pytest.fixture
def control_worker(redis_client):
    with control_worker_running():
        yield


# As many threads as gpulse/stack.py and docker-compose.yml give the webhook worker.
WEBHOOK_CONCURRENCY = 8


@contextmanager
def webhook_worker_running():
    app.conf.broker_url = os.environ["REDIS_URL"]
    import dashboard.alerts.tasks  # noqa: F401  (registers the webhook tasks)

    with start_worker(app, pool="threads", concurrency=WEBHOOK_CONCURRENCY, perform_ping_check=False,
                      queues=[WEBHOOK_QUEUE], loglevel="WARNING", shutdown_timeout=30):
        yield


@pytest.fixture
def webhook_worker(redis_client):
    with webhook_worker_running():
        yield
