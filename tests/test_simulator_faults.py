"""The simulator refuses a fault that cannot apply to what the node reports (issue 32): a GPU index past
its GPUs, NVLink down on a model without NVLink; in the API (400) and on the page."""

import json

import pytest

from collectors.simulated import MODELS, SimulatedFleet, redis_fault_reader
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


def test_a_missing_gpu_is_still_the_nodes_and_a_down_node_takes_any_fault(admin, fleet, redis_client):
    assert inject(admin, "sim-01", 7, "gpu_missing").status_code == 200
    fleet()  # its GPU 7 is gone from its sample
    assert [gpu["index"] for gpu in json.loads(redis_client.get(Keys().node("sim-01")))["gpus"]] == list(range(7))
    assert inject(admin, "sim-01", 7, "hot").status_code == 200
    assert inject(admin, "sim-01", 7, "clear").status_code == 200
    # A node without a current sample shows nothing to judge against.
    redis_client.delete(Keys().node("sim-02"))
    assert inject(admin, "sim-02", 12, "hot").status_code == 200


def test_the_page_says_why_and_injects_nothing(admin, fleet, redis_client):
    response = admin.post("/alerts/simulator/", {"node": "sim-01", "gpu": "9", "fault": "hot"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "sim-01 has 8 GPUs (GPUs 0-7): there is no GPU 9" in page and "hot injected" not in page
    response = admin.post("/alerts/simulator/", {"node": "sim-03", "gpu": "1", "fault": "nvlink_down"})
    assert response.status_code == 400
    assert "nvlink_down cannot apply to sim-03 GPU 1: the NVIDIA L40S has no NVLink" in response.content.decode()
    assert faults(redis_client) == {}
