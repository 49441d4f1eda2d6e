"""The system under load, as child processes: Redis, a migrated database, web, ingest, collectors.

Everything runs from the checkout as in production (uvicorn serving
dashboard.asgi with the flags start() explains, `manage.py ingest`, `python -m
collectors`), started and stopped through devtools.stack.Stack; only the data is
throw-away: a temporary SQLite database and, unless a Redis URL is given, a
private Redis server. With whole_demo, it is the system exactly as `make demo`
starts it (Stack.start: the control, webhook and node workers too, and Redis's
role users), logged in to as its admin.
"""

import http.cookiejar
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import psutil
import redis

from devtools.redis_server import EmbeddedRedis, free_port
from devtools.stack import ROOT, Stack
from gpulse.keys import Keys

# One simulated collector process per this many nodes: a sample of 250 × 8 GPUs
# takes a few tens of ms, so each process keeps the 1 s cadence with room to spare.
NODES_PER_COLLECTOR = 250
MAX_COLLECTORS = 4


def collector_count(nodes: int) -> int:
    return min(MAX_COLLECTORS, -(-nodes // NODES_PER_COLLECTOR))


def split(nodes: int, parts: int) -> list[int]:
    """Return ``parts`` node counts that add up to ``nodes``, as even as possible."""
    return [nodes // parts + (1 if k < nodes % parts else 0) for k in range(parts)]


# The most websocket clients a run may open (they are all one user).
MAX_CLIENTS = 10_000


class LoadSystem:
    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        interval: float,
        collectors: int | None = None,
        redis_url: str | None = None,
        ws_compression: bool = False,
        database_url: str | None = None,
        whole_demo: bool = False,
        seed: list[str] | None = None,
        web_processes: int = 1,
    ):
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.interval = interval
        self.whole_demo = whole_demo
        self.seed_args = seed  # devtools.loadtest.seed's arguments: old rows for the retention passes
        self.seeded: dict = {}
        self.collectors = 1 if whole_demo else collectors or collector_count(nodes)
        if self.collectors > nodes:
            raise ValueError(f"{self.collectors} collectors cannot share {nodes} nodes")
        self.ws_compression = ws_compression
        self.web_processes = web_processes
        self.state_dir = Path(tempfile.mkdtemp(prefix="gpulse-loadtest-"))
        self.password = secrets.token_urlsafe(16)
        # Its own user each run: a database given with --database-url may hold an earlier run's. The demo
        # makes its admin, with the password from GPULSE_ADMIN_PASSWORD.
        self.username = "admin" if whole_demo else f"loadtest-{secrets.token_hex(4)}"
        # On a Redis that is not ours, a prefix of our own keeps other data apart.
        self.prefix = None if redis_url is None else f"gpulse-loadtest-{secrets.token_hex(4)}:"
        self.keys = Keys(self.prefix)
        self.redis: EmbeddedRedis | None = None
        extra_env = {"GPULSE_ADMIN_PASSWORD": self.password, "GPULSE_LOG_LEVEL": "WARNING",
                     # Every client is this one user: its cap on sockets (20) would refuse --clients 100.
                     "GPULSE_WS_MAX_PER_USER": str(MAX_CLIENTS)}
        if self.prefix is not None:
            extra_env["GPULSE_REDIS_PREFIX"] = self.prefix
        self.stack = Stack(
            free_port(), self.state_dir, redis_url=redis_url, database_url=database_url, sim_nodes=nodes,
            sim_gpus=gpus_per_node, interval=interval, node_workers=whole_demo, extra_env=extra_env,
        )

    @property
    def url(self) -> str:
        return self.stack.url.rstrip("/")

    @property
    def redis_url(self) -> str:
        assert self.stack.redis_url is not None, "the stack sets it on start"
        return self.stack.redis_url

    def pids(self) -> dict[str, list[int]]:
        """Return the pids of each role: ingest, web (with its worker processes), collectors and (when it is
        ours) redis."""
        roles: dict[str, list[int]] = {}
        for name, process in self.stack.processes:
            children = [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
            roles.setdefault(name.split("-")[0], []).extend([process.pid, *children])
        redis_server = self.redis or self.stack.redis
        if redis_server is not None and redis_server.process is not None:
            roles["redis"] = [redis_server.process.pid]
        return roles

    def clients_per_web_process(self) -> list[int]:
        """The open connections each web process serves (its workers', where it has several), most first."""
        [web] = [process for name, process in self.stack.processes if name == "web"]
        counts = []
        for server in [psutil.Process(web.pid), *psutil.Process(web.pid).children()]:
            statuses = [connection.status for connection in server.net_connections(kind="tcp")
                        if connection.laddr.port == self.stack.port]
            # A worker serves from the socket its supervisor listens on; any other child (multiprocessing's
            # resource tracker) holds none of it, and a supervisor holds no client.
            if psutil.CONN_LISTEN in statuses and (server.pid != web.pid or self.web_processes == 1):
                counts.append(statuses.count(psutil.CONN_ESTABLISHED))
        return sorted(counts, reverse=True)

    def start(self) -> "LoadSystem":
        if self.whole_demo:
            self.stack.start()
            return self
        if self.stack.redis_url is None:
            self.redis = EmbeddedRedis(directory=str(self.state_dir / "redis")).start()
            self.stack.redis_url = self.redis.url
        py = sys.executable
        seed_args = self.seed_args
        if seed_args is None:  # collectors first: they need only Redis, and sample while Django starts elsewhere
            self._start_collectors()
        self.stack.manage("migrate", "--noinput")
        self.stack.manage("ensure_admin", "--username", self.username)
        if seed_args is not None:
            # Before the collectors, web and ingest: minutes of seeding beside running collectors left ingest
            # a backlog of their samples that it was still catching up on in the window (11 s lag at its
            # start); on SQLite the seeding's writes would also hold up ingest's.
            self.seeded = orjson.loads(self._run_module("devtools.loadtest.seed", *seed_args))
            self._start_collectors()
        # Browsers offer permessage-deflate and uvicorn accepts it by default: the web
        # process then compresses every ~250 KB frame once per browser, in its one
        # event loop (40 % of a core and a 2 s p99 at 100 clients). gpulse runs web
        # without it; --ws-compression measures the difference.
        deflate = "true" if self.ws_compression else "false"
        self.stack.spawn(
            "web", "web", py, "-m", "uvicorn", "dashboard.asgi:application", "--host", "127.0.0.1",
            "--port", str(self.stack.port), "--lifespan", "off", "--no-access-log",
            "--ws-per-message-deflate", deflate, "--workers", str(self.web_processes),
        )
        self.stack.spawn("ingest", "ingest", py, "manage.py", "ingest")
        self.stack.wait_for_web()
        return self

    def _start_collectors(self) -> None:
        for k, count in enumerate(split(self.nodes, self.collectors), start=1):
            self.stack.spawn(
                f"collector-{k}", "simulator", sys.executable, "-m", "collectors", "--source", "simulated",
                "--redis-url", self.redis_url,
                "--nodes", str(count), "--gpus-per-node", str(self.gpus_per_node), "--interval", str(self.interval),
                "--name-prefix", f"sim{k}-", "--seed", str(k), "--probe-interval", "0",
            )

    def _run_module(self, module: str, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=self.stack.role_env("control"),
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"python -m {module} failed:\n{done.stderr.strip()[-3000:]}")
        return done.stdout

    def start_pruner(self, every: float, window: tuple[float, float]) -> Path:
        """Start the retention passes (devtools.loadtest.pruner) for ``window``; return the file they log to."""
        log = self.state_dir / "retention-passes.jsonl"
        self.stack.spawn(
            "pruner", "control", sys.executable, "-m", "devtools.loadtest.pruner", "--every", str(every),
            "--log", str(log), "--first-at", str(window[0]), "--until", str(window[1]),
        )
        return log

    def check_running(self) -> None:
        """Raise RuntimeError naming a child process that has exited."""
        for name, process in self.stack.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode} during the load test; "
                    f"its last lines:\n{self.log_tail(name)}"
                )

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.state_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def login(self) -> str:
        """Log in through /accounts/login/ as a browser does (CSRF token included); return the session id."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        login_url = f"{self.url}/accounts/login/"
        opener.open(login_url, timeout=30).read()
        csrf = next((c.value for c in jar if c.name == "csrftoken"), None)
        if csrf is None:
            raise RuntimeError("the login page set no CSRF cookie")
        form = urllib.parse.urlencode(
            {"username": self.username, "password": self.password, "csrfmiddlewaretoken": csrf, "next": "/"}
        ).encode()
        opener.open(urllib.request.Request(login_url, data=form, headers={"Referer": login_url}), timeout=30).read()
        session = next((c.value for c in jar if c.name == "sessionid"), None)
        if session is None:
            raise RuntimeError(f"logging in as {self.username!r} at {login_url} failed")
        return session

    def collector_missed_ticks(self) -> int:
        """Sum the ticks the collectors reported skipping (they log each overrun)."""
        missed = 0
        for name, _process in self.stack.processes:
            if name.startswith("collector"):
                missed += sum(int(n) for n in re.findall(r"skipped (\d+) tick", self.log_tail(name, 10_000)))
        return missed

    def stop(self, keep_logs: bool = False) -> None:
        """Stop every process; remove the temporary state unless ``keep_logs`` (after a failure)."""
        try:
            self.stack.stop()
        finally:
            if self.redis is not None:
                self.redis.stop()
            elif self.prefix is not None and self.stack.redis_url:
                self._delete_our_keys()
            if not keep_logs:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    def _delete_our_keys(self) -> None:
        client = redis.Redis.from_url(self.stack.redis_url)
        try:
            batch = []
            for key in client.scan_iter(match=f"{self.prefix}*", count=1000):
                batch.append(key)
                if len(batch) == 1000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        finally:
            client.close()
