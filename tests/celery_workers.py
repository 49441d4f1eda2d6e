"""Real Celery workers for tests: node workers as subprocesses (as on GPU
nodes, no database); the control and webhook workers in-process, each on its
own queue and pool as in production (they share the test DB), or as processes
of their own on the test database: the webhook worker where a test needs it
beside the control worker, the control worker for tests that kill it."""

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from celery.contrib.testing.worker import start_worker

from dashboard.celery_app import app
from devtools.celery_process import spawn_worker, stop_workers, wait_ready
from gpulse.celery_contract import CONTROL_QUEUE, SCHEDULER_QUEUE, WEBHOOK_QUEUE, node_queue


class NodeWorkers:
    def __init__(self, redis_url: str, log_dir: Path):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, *nodes: str, timeout: float = 60, env: dict | None = None) -> None:
        """Start a worker for each of ``nodes``, with ``env`` added to its environment."""
        for node in nodes:
            self.processes[node] = spawn_worker(
                ["workers.node_worker", "worker", "-Q", node_queue(node), "-n", f"{node}@test", "--pool", "solo"],
                self.log_dir / f"worker-{node}.log", {"REDIS_URL": self.redis_url, **(env or {})},
            )
        deadline = time.monotonic() + timeout
        for node in nodes:
            wait_ready(self.processes[node], self.log_dir / f"worker-{node}.log", deadline)

    def kill(self, node: str) -> None:
        """SIGKILL the worker's main process only, as a crashed node would die."""
        self.processes[node].send_signal(signal.SIGKILL)
        self.processes[node].wait()

    def stop(self) -> None:
        stop_workers(list(self.processes.values()))


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


# As many threads as devtools/stack.py and docker-compose.yml give the webhook worker.
WEBHOOK_CONCURRENCY = 8


@contextmanager
def webhook_worker_running():
    app.conf.broker_url = os.environ["REDIS_URL"]
    import dashboard.alerts.tasks  # noqa: F401  (registers the webhook tasks)

    with start_worker(app, pool="threads", concurrency=WEBHOOK_CONCURRENCY, perform_ping_check=False,
                      queues=[WEBHOOK_QUEUE], loglevel="WARNING", shutdown_timeout=30):
        yield


@pytest.fixture(scope="module")
def webhook_worker(django_db_setup, django_db_blocker):
    """The in-process webhook worker, started once per test module, its queue emptied first."""
    app.control.purge()
    with webhook_worker_running():
        yield


@contextmanager
def scheduler_worker_running():
    """The scheduler worker (drains and resumes Slurm nodes) in-process, on its own queue as in production."""
    app.conf.broker_url = os.environ["REDIS_URL"]
    import dashboard.scheduler.tasks  # noqa: F401  (registers the scheduler tasks)

    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, queues=[SCHEDULER_QUEUE],
                      loglevel="WARNING", shutdown_timeout=30):
        yield


@pytest.fixture
def scheduler_worker(redis_client):
    app.control.purge()
    with scheduler_worker_running():
        yield


def database_url_of_tests() -> str:
    """The test database, as DATABASE_URL names it for a worker process."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    credentials = f"{quote(db['USER'])}:{quote(db['PASSWORD'])}@" if db["USER"] else ""
    return f"postgres://{credentials}{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@contextmanager
def webhook_worker_process(log_dir: Path, settings_env: dict, timeout: float = 60):
    """The webhook worker as its own process, as production runs it beside the control worker.

    Two in-process workers would share kombu's one event loop and read each
    other's replies: a test that needs both runs this one apart. Its settings
    come from ``settings_env`` (GPULSE_WEBHOOK_...), as in production.
    """
    log = log_dir / "webhook-worker.log"
    process = spawn_worker(
        ["dashboard.control_worker", "worker", "-Q", WEBHOOK_QUEUE, "-n", "webhooks@test",
         "--pool", "threads", "--concurrency", str(WEBHOOK_CONCURRENCY)],
        log, {"REDIS_URL": os.environ["REDIS_URL"], "DATABASE_URL": database_url_of_tests(), **settings_env},
    )
    try:
        wait_ready(process, log, time.monotonic() + timeout)
        yield
    finally:
        stop_workers([process])


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
        self.process = spawn_worker(
            ["dashboard.control_worker", "worker", "-Q", CONTROL_QUEUE, "-n", f"control-{self.started}@test",
             "--pool", "threads", "--concurrency", str(concurrency)],
            log, {"REDIS_URL": self.redis_url, "DATABASE_URL": database_url_of_tests(),
                  "GPULSE_RENDEZVOUS_ADDR": "127.0.0.1"},  # the test nodes all run here
        )
        wait_ready(self.process, log, time.monotonic() + timeout)

    def kill(self) -> None:
        """SIGKILL it, as Docker does once its stop grace period is over."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            stop_workers([self.process])


@pytest.fixture
def control_process(redis_server, redis_client, tmp_path):
    worker = ControlWorker(redis_server.url, tmp_path)
    yield worker
    worker.stop()
