"""MIG samples through ingest: the nvml source's sample of a MIG GPU (the NVML stand-in), and a node's
malformed instance list, each through a real Redis stream into ingest, its frames and its minute rollups."""

import time

import pytest

from dashboard.live.models import GpuRollup
from gpulse import schema
from tests import test_collector_nvml, test_ingest
from tests.samples import sample
from tests.test_collector_nvml import only_sample
from tests.test_ingest import xadd
from tests.test_mig_nvml import mig_gpu

pytestmark = pytest.mark.django_db
fake_library = test_collector_nvml.fake_library
open_source = test_collector_nvml.open_source
frames = test_ingest.frames
make_ingest = test_ingest.make_ingest


def test_a_mig_gpus_sample_is_ingested_whole(redis_client, make_ingest, frames, open_source):
    collected = only_sample(open_source(**mig_gpu(gpus=2, mig_on=[0])))
    ingest = make_ingest()
    xadd(redis_client, schema.encode(collected))
    assert ingest.read(block_ms=10) == 1
    ingest.emit(time.time())
    ingest.flush()

    assert (ingest.rejected, ingest.nulled) == (0, 0)
    assert set(frames[0]["nodes"]) == {"gpu-01"}
    rows = {row.gpu: row for row in GpuRollup.objects.filter(node="gpu-01")}
    assert rows[0].util_mean is None and rows[1].util_mean == 91  # MIG GPU: no utilization, never 0


def test_a_malformed_instance_list_costs_only_itself(redis_client, make_ingest, frames, caplog):
    entry = sample("mig-node", gpus=2)
    entry["gpus"][0]["mig"] = [{"gpu_instance": "one"}]
    ingest = make_ingest()
    xadd(redis_client, schema.encode(entry))
    assert ingest.read(block_ms=10) == 1
    ingest.emit(time.time())

    assert (ingest.rejected, ingest.nulled) == (0, 1)  # not rejected: counted with the nulled readings
    assert set(frames[0]["nodes"]) == {"mig-node"}
    assert "node mig-node GPU 0: 'mig' dropped: gpu_instance 'one' is not an integer 0..31" in caplog.text
