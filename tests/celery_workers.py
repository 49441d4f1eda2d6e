"""Real Celery workers for tests: node workers as subprocesses (as on GPU
nodes, no database), the control worker in-process (it shares the test DB),
or as a subprocess on the test database, for tests that kill it."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from workers.celery_app import CONTROL_QUEUE, app, node_queue

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
    from dashboard.benchmarks.reaper import Reaper

    # The test worker sends no worker_ready, which starts a real control worker's reaper.
    reaper = Reaper()
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, queues=[CONTROL_QUEUE],
                      loglevel="WARNING", shutdown_timeout=30):
        reaper.start()
        try:
            yield
        finally:
            reaper.stop()


@pytest.fixture
def control_worker(redis_client):
    with control_worker_running():
        yield


def database_url() -> str:
    """The URL of the test database, for a worker in another process."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class ControlWorker:
    """`celery -A dashboard.control_worker worker -Q control` as production runs it, so it can be SIGKILLed."""

    def __init__(self, redis_url: str, log_dir: Path):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.process: subprocess.Popen | None = None
        self.started = 0

    def start(self, concurrency: int = 4, timeout: float = 60) -> None:
        self.started += 1
        log = self.log_dir / f"control-{self.started}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dashboard.control_worker", "worker", "-Q", CONTROL_QUEUE,
             "-n", f"control-{self.started}@test", "--pool", "threads", "--concurrency", str(concurrency),
             "--without-gossip", "--without-mingle", "-l", "INFO"],
            cwd=ROOT, env={**os.environ, "REDIS_URL": self.redis_url, "DATABASE_URL": database_url(),
                                 "GPULSE_RENDEZVOUS_ADDR": "127.0.0.1"},  # the test nodes all run here
            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while b"ready." not in log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"control worker did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL it, as Docker does once its stop grace period is over."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture
def control_process(redis_server, redis_client, tmp_path):
    worker = ControlWorker(redis_server.url, tmp_path)
    yield worker
    worker.stop()
