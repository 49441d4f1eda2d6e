"""/metrics' MIG series (dashboard/mig_metrics.py): a real scrape of the running ASGI app, with a node whose
GPU 0 runs three MIG instances written to Redis beside tests/metrics_server.py's cluster."""

import json
import time

import pytest
import redis

from dashboard.metrics import EXPORTED_NAMES
from dashboard.mig_metrics import MIG_GAUGES
from gpulse import schema
from gpulse.keys import Keys
from tests.metrics_server import scrape, series_of, serve_metrics
from tests.samples import gpu, sample

GIB = 1 << 30
TRAINING = {"gpu_instance": 1, "compute_instance": 0, "profile": "3g.40gb", "uuid": "MIG-1",
            "mem_used": 30 * GIB, "mem_total": 40 * GIB, "processes": [],
            **dict.fromkeys(schema.ACTIVITY_METRIC_NAMES), "sm_active": 0.83, "tensor_active": 0.47}


def instances() -> list[dict]:
    shared = {**TRAINING, "gpu_instance": 5, "profile": "1c.2g.20gb", "mem_used": 2 * GIB, "mem_total": 20 * GIB,
              "sm_active": 0.02, "tensor_active": None}
    return [TRAINING, shared, {**shared, "compute_instance": 1, "uuid": "MIG-2"}]


@pytest.fixture(scope="module")
def scraped(redis_server, tmp_path_factory) -> dict[str, dict[tuple, float]]:
    with serve_metrics(redis_server.url, tmp_path_factory.mktemp("mig-metrics")) as url:
        client = redis.Redis.from_url(redis_server.url)
        now, interval = time.time(), 60.0
        node = sample("mig1", ts=now, interval=interval, gpus=0) | {"gpus": [
            gpu(0, util=None, mig_enabled=True, mig=instances()), gpu(1)]}
        client.set(Keys().node("mig1"), schema.encode(node), ex=600)
        client.hset(Keys().known_nodes, "mig1", json.dumps({"ts": now, "interval": interval}))
        status, text = scrape(url)
        client.close()
    assert status == 200, text
    return series_of(text)


def labels(gpu_instance: int, compute_instance: int, profile: str) -> tuple:
    return tuple(sorted({"node": "mig1", "gpu": "0", "uuid": "GPU-00000000", "model": "NVIDIA H100 80GB HBM3",
                         "gpu_instance": str(gpu_instance), "compute_instance": str(compute_instance),
                         "profile": profile}.items()))


def test_each_instance_exports_its_memory_and_activity_with_dcgm_exporters_labels(scraped):
    training, shared0, shared1 = labels(1, 0, "3g.40gb"), labels(5, 0, "1c.2g.20gb"), labels(5, 1, "1c.2g.20gb")
    assert scraped["gpulse_mig_memory_used_bytes"] == {training: 30 * GIB, shared0: 2 * GIB, shared1: 2 * GIB}
    assert scraped["gpulse_mig_memory_total_bytes"][training] == 40 * GIB
    assert scraped["gpulse_mig_sm_active_ratio"] == {training: 0.83, shared0: 0.02, shared1: 0.02}
    # a reading the instance does not report is left out, never 0
    assert scraped["gpulse_mig_tensor_active_ratio"] == {training: 0.47}
    assert "gpulse_mig_dram_active_ratio" not in scraped


def test_the_mig_gpu_exports_no_utilization_and_other_gpus_no_mig_series(scraped):
    assert not any(dict(key)["node"] == "mig1" and dict(key)["gpu"] == "0"
                   for key in scraped["gpulse_gpu_utilization_ratio"])
    assert {dict(key)["node"] for key in scraped["gpulse_mig_memory_used_bytes"]} == {"mig1"}


def test_every_mig_series_is_a_declared_name_in_base_units(scraped):
    assert {name for name in scraped if name.startswith("gpulse_mig_")} <= EXPORTED_NAMES
    assert all(name.endswith(("_bytes", "_ratio")) for name, _ in MIG_GAUGES.values())
