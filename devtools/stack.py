"""Start and stop the whole system as child processes: the demo and the system tests.

Redis (embedded unless REDIS_URL is given), the database migrations, the
web server, ingest, the control and webhook workers (and the scheduler worker
when GPULSE_SLURM_DRAIN is on), celery beat and a simulated fleet — every process stopped
again by stop(). The fleet's first node runs as a real GPU node does: a
collector and a benchmark worker of its own, logged in as its own ACL users
(node-<name>, nodeworker-<name>) with URLs read from files under the state
folder's credentials/. One more collector and one benchmark worker serve every
other simulated node.
"""

import functools
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import redis

from devtools.lifetime import die_with_parent
from devtools.redis_server import EmbeddedRedis
from gpulse.keys import DEFAULT_PREFIX
from gpulse.redis_acl import create_role_users

ROOT = Path(__file__).resolve().parent.parent


def sim_node_names(nodes: int) -> list[str]:
    """Names the simulated fleet gives its nodes (collectors.simulated uses the same rule)."""
    width = max(2, len(str(nodes)))
    return [f"sim-{i:0{width}d}" for i in range(1, nodes + 1)]


class Stack:
    def __init__(
        self,
        port: int,
        state_dir: Path,
        redis_url: str | None = None,
        database_url: str | None = None,
        sim_nodes: int = 4,
        sim_gpus: int = 8,
        sim_mig_node: str | None = None,
        interval: float = 1.0,
        node_workers: bool = True,
        extra_env: dict | None = None,
    ):
        self.port = port
        self.state_dir = Path(state_dir)
        self.redis_url = redis_url
        self.database_url = database_url or f"sqlite:///{self.state_dir / 'db.sqlite3'}"
        self.sim_nodes = sim_nodes
        # The node run the production way (the module's docstring).
        self.own_node = sim_node_names(sim_nodes)[0]
        self.sim_gpus = sim_gpus
        self.sim_mig_node = sim_mig_node  # the simulated node whose GPUs run MIG instances (None: none)
        self.interval = interval
        self.node_workers = node_workers
        self.extra_env = extra_env or {}
        self.redis: EmbeddedRedis | None = None
        self.role_urls: dict[str, str] = {}  # ACL user -> its URL, when the stack owns Redis
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.admin_line = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def env(self) -> dict:
        assert self.redis_url is not None, "start() sets the Redis URL"
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.redis_url,
            DATABASE_URL=self.database_url,
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            PYTHONUNBUFFERED="1",
            # The simulated nodes all live on this machine: benchmark ranks meet on loopback.
            GPULSE_RENDEZVOUS_ADDR="127.0.0.1",
            # One node worker serves every simulated node, in one broker key space of its own
            # (gpulse/celery_contract.py node_broker): the control worker sends their tasks there.
            GPULSE_SIMULATED_NODES="sim-",
            # ... but the first, which has a worker and key space of its own, as a real node.
            GPULSE_SIMULATED_EXCEPT=self.own_node,
        )
        # A demo's (and the browser tests') notifications go out a second after their node's first alert.
        env.setdefault("GPULSE_ALERT_GROUP_WAIT", "1")
        env.update(self.extra_env)
        return env

    def role_url(self, role: str) -> str:
        """The Redis URL of ``role``'s ACL user (gpulse/redis_acl.py); the stack's own where it made none."""
        assert self.redis_url is not None, "start() sets the Redis URL"
        return self.role_urls.get(role, self.redis_url)

    def role_env(self, role: str) -> dict:
        """The environment of a process that connects to Redis as ``role``."""
        return {**self.env, "REDIS_URL": self.role_url(role)}

    @property
    def credentials(self) -> Path:
        return self.state_dir / "credentials"

    def write_credential(self, role: str) -> Path:
        """Keep ``role``'s Redis URL in a file of its own, readable by this user only, where an operator
        keeps a node's credential: node-side processes read it from there, never from a command line."""
        self.credentials.mkdir(mode=0o700, exist_ok=True)
        path = self.credentials / f"{role}-redis-url"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(self.role_url(role) + "\n")
        return path

    def file_env(self, credential: Path) -> dict:
        """The environment of a node-side process that reads its Redis URL from ``credential`` only."""
        env = {key: value for key, value in self.env.items() if key != "REDIS_URL"}
        return {**env, "GPULSE_REDIS_URL_FILE": str(credential)}

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.role_env("web"), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr.strip()}")
        return done.stdout.strip()

    def spawn(self, name: str, role: str, *command: str, env: dict | None = None) -> None:
        """Start ``command`` as ``role`` (or with ``env``), logging to <name>.log. Its own process group, so
        stop() ends it and everything it started; killed when this process ends without stop(): a SIGTERM
        then would be a request nobody waits on, and a Celery worker finishes its running task first."""
        log = open(self.state_dir / f"{name}.log", "ab")
        process = subprocess.Popen(
            command, cwd=ROOT, env=env or self.role_env(role), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
        )
        self.processes.append((name, process))

    def start(self) -> "Stack":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.redis_url is None:
            self.redis = EmbeddedRedis(directory=str(self.state_dir / "redis"), acl_file=True).start()
            self.redis_url = self.redis.url
            # Each process connects as its own least-privileged user, as in production; the
            # stack itself (and the tests and load test through it) keeps the default user.
            prefix = self.env.get("GPULSE_REDIS_PREFIX") or DEFAULT_PREFIX
            self.role_urls = create_role_users(self.redis_url, prefix, [self.own_node], simulator_prefix="sim-")
            with redis.Redis.from_url(self.redis_url) as admin:
                admin.acl_save()  # the users outlive a restart of the server
        self.manage("migrate", "--noinput")
        self.admin_line = self.manage("ensure_admin")
        py = sys.executable
        self.spawn(
            "web", "web", py, "-m", "uvicorn", "dashboard.asgi:application",
            "--host", "127.0.0.1", "--port", str(self.port), "--lifespan", "off", "--no-access-log",
            # Frames are large and sent to every browser: compressing each copy
            # costs the web process more CPU than the bandwidth it saves.
            "--ws-per-message-deflate", "false",
            # The client address uvicorn puts in REMOTE_ADDR (the login lockout's key)
            # comes from X-Forwarded-For only when a trusted proxy sent it.
            "--forwarded-allow-ips", os.environ.get("GPULSE_FORWARDED_ALLOW_IPS", "127.0.0.1,::1"),
        )
        self.spawn("ingest", "ingest", py, "manage.py", "ingest")
        self.spawn(
            "control-worker", "control", py, "-m", "celery", "-A", "dashboard.control_worker", "worker",
            "-Q", "control", "-n", f"control-{self.port}@%h", "--pool", "threads", "--concurrency", "4",
            "--without-gossip", "--without-mingle", "-l", "INFO",
        )
        # The cluster's one beat: it sends the retention pass to the control worker. Its schedule file
        # lives in the state folder, never in the working tree.
        self.spawn(
            "beat", "control", py, "-m", "celery", "-A", "dashboard.control_worker", "beat",
            "--schedule", str(self.state_dir / "celerybeat-schedule"), "-l", "INFO",
        )
        self.spawn(
            "webhook-worker", "control", py, "-m", "celery", "-A", "dashboard.control_worker", "worker",
            "-Q", "webhooks", "-n", f"webhooks-{self.port}@%h", "--pool", "threads", "--concurrency", "8",
            "--without-gossip", "--without-mingle", "-l", "INFO",
        )
        # The values dashboard/env.py env_bool reads as true (the settings refuse anything else).
        if self.env.get("GPULSE_SLURM_DRAIN", "").lower() in ("true", "1", "yes"):
            # scontrol calls, apart: a slurmctld that does not answer holds these threads only.
            self.spawn(
                "scheduler-worker", "control", py, "-m", "celery", "-A", "dashboard.control_worker", "worker",
                "-Q", "scheduler", "-n", f"scheduler-{self.port}@%h", "--pool", "threads", "--concurrency", "2",
                "--without-gossip", "--without-mingle", "-l", "INFO",
            )
        own = self.own_node
        if self.node_workers:
            # The first node's worker, as on a GPU node: its own queue in its own key space,
            # its own user, its URL from its file.
            self.spawn(
                f"node-worker-{own}", f"nodeworker-{own}", py, "-m", "celery", "-A", "workers.node_worker", "worker",
                "-Q", f"node.{own}", "-n", f"{own}-{self.port}@%h", "--pool", "solo",
                "--without-gossip", "--without-mingle", "-l", "INFO",
                env=self.file_env(self.write_credential(f"nodeworker-{own}")),
            )
            others = sim_node_names(self.sim_nodes)[1:]
            # One Celery worker serves every other simulated node, consuming each node's queue
            # and keeping each node's heartbeat: a worker per node cost ~270 MB apiece.
            # Its queues lie in the one simulated broker key space, its ACL user
            # (simulated-nodeworker) reaches only sim-* nodes' keys, remote control off.
            # A thread per node, so the nodes of one job run their ranks side by side.
            if others:
                self.spawn(
                    "node-worker", "simulated-nodeworker", py, "-m", "celery", "-A", "workers.node_worker", "worker",
                    "-Q", ",".join(f"node.{node}" for node in others), "-n", f"nodes-{self.port}@%h",
                    "--pool", "threads", "--concurrency", str(len(others)),
                    "--without-gossip", "--without-mingle", "-l", "INFO",
                )
        fleet = ("--source", "simulated", "--nodes", str(self.sim_nodes), "--gpus-per-node", str(self.sim_gpus),
                 "--interval", str(self.interval), *(("--mig-node", self.sim_mig_node) if self.sim_mig_node else ()))
        # The first node's collector writes as node-<name>, which reads nothing: the faults set from the
        # simulator page come through a user that reads only them.
        self.spawn(
            f"collector-{own}", f"node-{own}", py, "-m", "collectors", *fleet, "--only-node", own,
            "--redis-url-file", str(self.write_credential(f"node-{own}")),
            "--faults-url-file", str(self.write_credential("simulator-faults")),
            env=self.file_env(self.credentials / f"node-{own}-redis-url"),
        )
        if self.sim_nodes > 1:
            self.spawn(
                "collector", "simulator", py, "-m", "collectors", *fleet, "--except-node", own,
                "--redis-url-file", str(self.write_credential("simulator")),
            )
        self.wait_for_web()
        return self

    def wait_for_web(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {process.returncode}; see {self.state_dir / name}.log")
            try:
                urllib.request.urlopen(self.url + "healthz", timeout=2)
                return
            except urllib.error.HTTPError:
                return  # 503 while ingest warms up still means the web server answers
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the web server did not answer on {self.url} within {timeout:.0f} s")

    def stop(self) -> None:
        for _name, process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _name, process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
