"""Live nodes for benchmark tests, registered as a fixture in tests/conftest.py."""

import json
import time

import pytest

from gpulse import schema
from gpulse.keys import Keys
from tests.samples import sample


def report_nodes(redis_client, names: list[str]) -> list[str]:
    """Make ``names`` nodes that report 2 GPUs each, as the collector would have written them."""
    keys = Keys()
    now = time.time()
    for name in names:
        redis_client.set(keys.node(name), schema.encode(sample(name, gpus=2, ts=now, interval=60)))
        redis_client.hset(keys.known_nodes, name, json.dumps({"ts": now, "interval": 60}))
    return names


@pytest.fixture
def live_nodes(redis_client, settings):
    """Two nodes reporting 2 GPUs each, both on this machine, as the demo's simulated nodes are."""
    settings.GPULSE_RENDEZVOUS_ADDR = "127.0.0.1"
    return report_nodes(redis_client, ["bench-a", "bench-b"])
