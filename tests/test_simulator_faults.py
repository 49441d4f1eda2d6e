"""The simulator refuses a fault that cannot apply to what the node reports (issue 32): a GPU index past
its GPUs (a down node's too), NVLink down on a model without NVLink, InfiniBand down on a node without a
port; in the API (400) and on the page."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from collectors.simulated import MODELS, SimulatedFleet, redis_fault_reader
from dashboard.live.models import GpuRollup
from gpulse import schema
from gpulse.keys import Keys

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(redis_client):
    """Four simulated nodes of 8 GPUs, their latest samples where ingest puts them: sim-03's are L40S."""
    keys = Keys()
    simulated = SimulatedFleet(4, 8, 1.0, seed=7, fault_reader=redis_fault_reader(redis_client, keys))

    def report():
        for sample in simulated.sample():
            redis_client.set(keys.node(sample["node"]), schema.encode(sample))
            redis_client.hset(keys.known_nodes, sample["node"], json.dumps({"ts": sample["ts"], "interval": 1.0}))

    report()
    assert MODELS[2].name == "NVIDIA L40S" and MODELS[2].nvlink_links == 0
    return report


def faults(redis_client) -> dict:
    return {k.decode(): v.decode() for k, v in redis_client.hgetall(Keys().simulator_faults).items()}


def inject(client, node, gpu, fault):
    return client.post("/api/v1/simulator/faults", json.dumps({"node": node, "gpu": gpu, "fault": fault}),
                       content_type="application/json")


@pytest.mark.parametrize("gpu", [8, 9, 42])
def test_a_gpu_the_node_does_not_have_is_a_400_naming_its_gpus(admin, fleet, redis_client, gpu):
    response = inject(admin, "sim-01", gpu, "hot")
    assert response.status_code == 400
    assert response.json()["error"] == f"gpu: sim-01 has 8 GPUs (GPUs 0-7): there is no GPU {gpu}"
    assert faults(redis_client) == {}


def test_nvlink_down_on_a_model_without_nvlink_is_a_400(admin, fleet, redis_client):
    for gpu, where in [(2, "sim-03 GPU 2"), (None, "sim-03's GPUs")]:
        response = inject(admin, "sim-03", gpu, "nvlink_down")
        assert response.status_code == 400
        assert response.json()["error"] == f"fault: nvlink_down cannot apply to {where}: the NVIDIA L40S has no NVLink"
    assert faults(redis_client) == {}
    # An H100 has NVLink; any other fault applies to an L40S.
    assert inject(admin, "sim-01", 2, "nvlink_down").status_code == 200
    assert inject(admin, "sim-03", 2, "hot").status_code == 200
    assert faults(redis_client) == {"sim-01/2": "nvlink_down", "sim-03/2": "hot"}


def test_a_missing_gpu_is_still_the_nodes_and_a_node_nothing_is_known_of_takes_any_fault(admin, fleet, redis_client):
    assert inject(admin, "sim-01", 7, "gpu_missing").status_code == 200
    fleet()  # its GPU 7 is gone from its sample
    assert [gpu["index"] for gpu in json.loads(redis_client.get(Keys().node("sim-01")))["gpus"]] == list(range(7))
    assert inject(admin, "sim-01", 7, "hot").status_code == 200
    assert inject(admin, "sim-01", 7, "clear").status_code == 200
    # Neither a sample nor a minute of rollups: nothing to judge against.
    redis_client.delete(Keys().node("sim-02"))
    assert inject(admin, "sim-02", 12, "hot").status_code == 200


def rolled_up(node: str, gpus: range, minutes_ago: int) -> None:
    """A minute of the node's GPUs as ingest folds them into the database."""
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    GpuRollup.objects.bulk_create(GpuRollup(node=node, gpu=gpu, minute=minute, samples=60) for gpu in gpus)


def test_a_down_node_is_judged_by_the_gpus_it_last_reported(admin, fleet, redis_client):
    """Issue 32: with sim-01 down, "sim-01 GPU 9: hot" on its 8 GPUs was confirmed: no check ran."""
    keys = Keys()
    # Down, its latest sample not yet expired: judged by that sample.
    redis_client.hset(keys.known_nodes, "sim-01", json.dumps({"ts": time.time() - 600, "interval": 1.0}))
    response = inject(admin, "sim-01", 9, "hot")
    assert response.status_code == 400
    assert response.json()["error"] == "gpu: sim-01 has 8 GPUs (GPUs 0-7): there is no GPU 9"
    # Down and expired: judged by its newest minute of rollups (a GPU it had before that minute is gone).
    redis_client.delete(keys.node("sim-02"))
    rolled_up("sim-02", range(8), minutes_ago=5)
    rolled_up("sim-02", range(4), minutes_ago=3)
    response = admin.post("/alerts/simulator/", {"node": "sim-02", "gpu": "5", "fault": "hot"})
    assert response.status_code == 400
    assert "sim-02 has 4 GPUs (GPUs 0-3): there is no GPU 5" in response.content.decode()
    assert faults(redis_client) == {}
    assert inject(admin, "sim-02", 3, "hot").status_code == 200
    assert inject(admin, "sim-01", 7, "hot").status_code == 200
    assert faults(redis_client) == {"sim-02/3": "hot", "sim-01/7": "hot"}


def reporting_ports(redis_client, node: str, ports: list | None) -> None:
    """The node's latest sample with these InfiniBand ports: [] a node without any, None a source that
    does not read them."""
    sample = schema.parse(redis_client.get(Keys().node(node)))
    redis_client.set(Keys().node(node), schema.encode({**sample, "ib": ports}))


def test_ib_down_on_a_node_without_an_infiniband_port_is_refused_saying_why(admin, fleet, redis_client):
    reporting_ports(redis_client, "sim-04", [])
    why = "ib_down cannot apply to sim-04: its latest sample shows no InfiniBand port"
    response = inject(admin, "sim-04", None, "ib_down")
    assert response.status_code == 400
    assert response.json()["error"] == f"fault: {why}"
    response = admin.post("/alerts/simulator/", {"node": "sim-04", "fault": "ib_down"})
    assert response.status_code == 400
    assert why in response.content.decode() and "ib_down injected" not in response.content.decode()
    assert faults(redis_client) == {}
    # The simulated fleet's four ports take it; a source that does not read its ports is not judged.
    assert inject(admin, "sim-01", None, "ib_down").status_code == 200
    reporting_ports(redis_client, "sim-04", None)
    assert inject(admin, "sim-04", None, "ib_down").status_code == 200
    assert faults(redis_client) == {"sim-01": "ib_down", "sim-04": "ib_down"}


def test_the_page_says_why_and_injects_nothing(admin, fleet, redis_client):
    response = admin.post("/alerts/simulator/", {"node": "sim-01", "gpu": "9", "fault": "hot"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "sim-01 has 8 GPUs (GPUs 0-7): there is no GPU 9" in page and "hot injected" not in page
    response = admin.post("/alerts/simulator/", {"node": "sim-03", "gpu": "1", "fault": "nvlink_down"})
    assert response.status_code == 400
    assert "nvlink_down cannot apply to sim-03 GPU 1: the NVIDIA L40S has no NVLink" in response.content.decode()
    assert faults(redis_client) == {}
