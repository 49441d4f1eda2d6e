"""The whole system, started once per test session: Redis, web, ingest, a simulated fleet.

A pytest plugin: list it in ``pytest_plugins`` (never import the fixture into a
test module, which would start a second system).
"""

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import orjson
import pytest
import redis

from devtools.redis_server import free_port
from devtools.stack import Stack
from gpulse.keys import Keys

SIM_NODES = 4
SIM_GPUS = 8
IDLE_MIN_SECONDS = 30
ADMIN_USER = "admin"
ADMIN_PASSWORD = "system-test-admin-pw"


@dataclass(frozen=True)
class RunningSystem:
    stack: Stack
    base_url: str  # http://127.0.0.1:<port>, no trailing slash
    username: str
    password: str

    @property
    def port(self) -> int:
        return self.stack.port

    @property
    def nodes(self) -> int:
        return self.stack.sim_nodes

    @property
    def gpus_per_node(self) -> int:
        return self.stack.sim_gpus

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.stack.redis_url)

    def process(self, name: str):
        """Return the Popen of one of the stack's processes ("web", "ingest", "collector", ...)."""
        return next(process for process_name, process in self.stack.processes if process_name == name)

    def reboot_simulated_nodes(self) -> None:
        """Restart the collector of every simulated node but the first, as rebooting those nodes would: what
        it remembers starts afresh, such as an Xid, which keeps its node failing for 15 minutes (and the
        default "Node failing" rule firing, muting the node's GPU alerts) after the fault is cleared."""
        collector = self.process("collector")
        os.killpg(collector.pid, signal.SIGTERM)
        collector.wait(10)
        self.stack.processes.remove(("collector", collector))
        self.stack.spawn("collector", "simulator", *collector.args)

    @contextmanager
    def web_down(self) -> Iterator[None]:
        """Stop the web server (every browser's websocket closes), and start it again on
        the same port when the block ends."""
        web = self.process("web")
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(10)
        self.stack.processes.remove(("web", web))
        try:
            yield
        finally:
            self.stack.spawn("web", "web", *web.args)
            self.stack.wait_for_web()


def wait_for_fleet(client: redis.Redis, nodes: int, gpus: int, timeout: float = 60.0) -> None:
    """Wait until ingest's snapshot frame holds every simulated node with all its GPUs."""
    keys = Keys()
    deadline = time.monotonic() + timeout
    seen = {}
    while time.monotonic() < deadline:
        raw = client.get(keys.snapshot)
        seen = orjson.loads(raw)["nodes"] if raw else {}
        if len(seen) == nodes and all(len(node["gpus"]) == gpus and node["status"] == "up" for node in seen.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(
        f"ingest did not report {nodes} nodes x {gpus} GPUs up within {timeout:.0f} s; saw {sorted(seen)}"
    )


@pytest.fixture(scope="session")
def running_system(tmp_path_factory) -> RunningSystem:
    state_dir = tmp_path_factory.mktemp("system")
    stack = Stack(
        port=free_port(),
        state_dir=state_dir,
        redis_url=None,  # its own embedded Redis, apart from the suite's
        sim_nodes=SIM_NODES,
        sim_gpus=SIM_GPUS,
        interval=1.0,
        node_workers=True,  # the benchmark tests launch real jobs on the simulated nodes
        # IDLE_MIN_SECONDS: a GPU counts as idle after that long, not 10 minutes into a test session.
        extra_env={"GPULSE_ADMIN_PASSWORD": ADMIN_PASSWORD, "GPULSE_IDLE_MIN_SECONDS": str(IDLE_MIN_SECONDS)},
    )
    try:
        stack.start()
        # The browser tests share this system, each clearing its faults after it: an alert its rule holds
        # firing for minutes after (keep_firing_for, on by default on the Xid and node-failing rules)
        # would still be firing in the next test. Their holding is tested in test_alerts_keep_firing.py
        # and test_drain_storm.py. bump(): the evaluator reloads the rules at its next tick.
        stack.manage("shell", "-c", "from dashboard.alerts.models import Rule; "
                                    "from dashboard.alerts import generation; "
                                    "Rule.objects.update(keep_firing_for=0); generation.bump()")
        client = redis.Redis.from_url(stack.redis_url)
        wait_for_fleet(client, SIM_NODES, SIM_GPUS)
        client.close()
    except BaseException:
        stack.stop()
        raise
    yield RunningSystem(stack, stack.url.rstrip("/"), ADMIN_USER, ADMIN_PASSWORD)
    stack.stop()
