"""The dcgm source's activity readings: DCGM's profiling fields, served by dcgm-exporter over real HTTP.

tests/data/dcgm-exporter-profiling.txt is one H100 node in dcgm-exporter's format
with the dcp-metrics counters enabled: GPUs 0 and 1 train, GPU 2 runs the stalled
data loader (100 % utilization, 8 % SM activity), GPU 3 is in MIG mode with three
instances (series with GPU_I_PROFILE and GPU_I_ID labels), and GPU 1's DFMA
field is DCGM's fp64 blank.
"""

from pathlib import Path

from collectors.dcgm import PROFILING_FIELDS, DcgmSource
from gpulse import schema
from tests import test_collector_dcgm
from tests.test_collector_dcgm import RECORDED, gpus_of

PROFILING = (Path(__file__).parent / "data" / "dcgm-exporter-profiling.txt").read_text()
exporter = test_collector_dcgm.exporter  # a stand-in dcgm-exporter serving .body (a fixture)


def activity(gpu: dict) -> dict:
    return {name: gpu[name] for name in schema.ACTIVITY_METRIC_NAMES}


def test_every_activity_reading_has_its_dcgm_field():
    assert tuple(PROFILING_FIELDS) == schema.ACTIVITY_METRIC_NAMES
    assert all(field.startswith("DCGM_FI_PROF_") for field in PROFILING_FIELDS.values())


def test_the_profiling_fields_become_the_activity_readings_as_ratios(exporter):
    exporter.body = PROFILING
    (sample,) = DcgmSource(exporter.url, interval=1.0).sample()
    assert sample["node"] == "dgx-h100-042"
    gpu = gpus_of(schema.parse(schema.encode(sample)))

    assert activity(gpu[0]) == {
        "gr_active": 0.981, "sm_active": 0.873, "sm_occupancy": 0.412, "tensor_active": 0.537,
        "tensor_hmma_active": 0.537, "tensor_imma_active": 0.0, "tensor_dmma_active": 0.0, "dram_active": 0.446,
        "fp64_active": 0.0, "fp32_active": 0.093, "fp16_active": 0.041,
    }
    assert gpu[0]["pcie_tx"] == 1289731584 and gpu[0]["nvlink_rx"] == 151298138112  # bytes/s, as before
    assert gpu[1]["tensor_dmma_active"] is None  # DCGM's blank: null, never 9.2e18 or 0
    assert gpu[1]["sm_active"] == 0.861
    # the stalled data loader: "100 % utilized" with its SMs nearly idle
    assert (gpu[2]["util"], gpu[2]["sm_active"], gpu[2]["tensor_active"]) == (100, 0.081, 0.004)


def test_a_mig_gpu_reports_no_activity_of_its_own_and_keeps_its_board_readings(exporter):
    exporter.body = PROFILING
    gpu = gpus_of(DcgmSource(exporter.url, interval=1.0).sample()[0])[3]

    # DCGM profiles the instances; their series are not the GPU's (tests/test_mig_dcgm.py: the instances')
    assert activity(gpu) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
    assert gpu["util"] is None and gpu["mem_used"] is None
    assert (gpu["temp"], gpu["power"], gpu["pcie_tx"]) == (55, 402.991, 311427072)


def test_the_default_counters_give_graphics_tensor_and_dram_activity_and_null_for_the_rest(exporter):
    exporter.body = RECORDED  # dcgm-exporter's default counters CSV
    gpu = gpus_of(DcgmSource(exporter.url, interval=1.0).sample()[0])[0]

    served = {"gr_active": 0.981, "tensor_active": 0.612, "dram_active": 0.447}
    assert activity(gpu) == {**dict.fromkeys(schema.ACTIVITY_METRIC_NAMES), **served}
