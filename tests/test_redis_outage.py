"""Stopping Redis for 10 s: collectors, ingest, web and workers ride it out by themselves."""

import json
import time
import urllib.error
import urllib.request

import pytest

from devtools.redis_server import free_port
from devtools.stack import Stack


def healthz(stack: Stack) -> dict:
    try:
        return json.load(urllib.request.urlopen(stack.url + "healthz", timeout=5))
    except urllib.error.HTTPError as exc:
        return json.load(exc)


def wait_healthy(stack: Stack, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        health = healthz(stack)
        if health["ok"] or time.monotonic() > deadline:
            return health
        time.sleep(0.5)


@pytest.fixture
def stack(tmp_path):
    stack = Stack(port=free_port(), state_dir=tmp_path, sim_nodes=2, sim_gpus=2, node_workers=True)
    stack.start()
    yield stack
    stack.stop()


def test_the_system_recovers_from_a_ten_second_redis_outage(stack):
    assert wait_healthy(stack, 30)["ok"]
    stack.redis.stop()
    time.sleep(3)
    down = healthz(stack)
    assert not down["ok"] and not down["checks"]["redis"]["ok"]
    assert "unreachable" in down["checks"]["redis"]["detail"]
    time.sleep(7)
    stack.redis.start()
    health = wait_healthy(stack, 30)
    assert health["ok"], health
    assert "2 nodes" in health["checks"]["ingest"]["detail"]
    for name, process in stack.processes:
        assert process.poll() is None, f"{name} exited during the outage; see {stack.state_dir / name}.log"
    collector_log = (stack.state_dir / "collector.log").read_text()
    assert "unreachable" in collector_log.lower()
