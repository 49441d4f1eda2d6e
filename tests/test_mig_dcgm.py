"""MIG instances from the dcgm source: dcgm-exporter's GPU_I_ID series, served over real HTTP.

tests/data/dcgm-exporter-mig.txt is an A100 node in dcgm-exporter 3.3's format
(``Hostname`` label): GPU 0 whole, training; GPU 1 in MIG mode with four
instances: GI 1 (3g.40gb, pod ml/bert-finetune-0, training), GI 5 (2g.20gb,
a notebook), GI 9 (1g.10gb, its profiling fields DCGM's fp64 blank) and GI 13
(1g.10gb, idle). tests/data/dcgm-exporter-profiling.txt's GPU 3 (H100) has three.
"""

from pathlib import Path

from collectors.dcgm import DcgmSource
from gpulse import schema
from tests import test_collector_dcgm
from tests.test_collector_dcgm import MIB, gpus_of

DATA = Path(__file__).parent / "data"
MIG = (DATA / "dcgm-exporter-mig.txt").read_text()
PROFILING = (DATA / "dcgm-exporter-profiling.txt").read_text()
exporter = test_collector_dcgm.exporter  # a stand-in dcgm-exporter serving .body (a fixture)
NO_ACTIVITY = dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)


def sample_of(exporter, body: str) -> dict:
    exporter.body = body
    (sample,) = DcgmSource(exporter.url, interval=1.0).sample()
    assert schema.parse(schema.encode(sample)) == sample  # valid, and nothing dropped
    return sample


def test_each_gpu_instance_series_becomes_an_instance_of_its_gpu(exporter):
    gpus = gpus_of(sample_of(exporter, MIG))

    assert "mig" not in gpus[0]
    training, notebook, blank, idle = gpus[1]["mig"]
    assert training == {
        "gpu_instance": 1, "compute_instance": None, "profile": "3g.40gb", "uuid": None,
        "mem_used": 30118 * MIB, "mem_total": (30118 + 9850) * MIB, "processes": None,
        **NO_ACTIVITY, "gr_active": 0.958, "sm_active": 0.833, "tensor_active": 0.466, "dram_active": 0.355,
        "k8s": {"pod": "bert-finetune-0", "namespace": "ml", "container": "trainer"},
    }
    assert (notebook["profile"], notebook["sm_active"], notebook["k8s"]["pod"]) == ("2g.20gb", 0.027, "jupyter-alice")
    # DCGM's blank: null, never 1.4e14 or 0; the memory still reported
    assert blank["gpu_instance"] == 9 and blank["sm_active"] is None and blank["mem_used"] == 13 * MIB
    assert (idle["gpu_instance"], idle["sm_active"], "k8s" in idle) == (13, 0.0, False)


def test_the_mig_gpu_keeps_its_board_readings_and_no_utilization_of_its_own(exporter):
    gpu = gpus_of(sample_of(exporter, MIG))[1]

    assert (gpu["temp"], gpu["power"], gpu["sm_clock"]) == (48, 187.604, 1410)
    assert gpu["util"] is None and gpu["mem_used"] is None and gpu["sm_active"] is None
    assert "k8s" not in gpu  # the instances' pods are theirs, not the GPU's


def test_the_profiling_payloads_mig_gpu_reports_its_three_instances(exporter):
    gpu = gpus_of(sample_of(exporter, PROFILING))[3]

    assert [(i["gpu_instance"], i["profile"], i["mem_used"], i["sm_active"]) for i in gpu["mig"]] == [
        (1, "3g.40gb", 296 * MIB, 0.842), (5, "2g.20gb", 312 * MIB, 0.0), (13, "1g.10gb", 5203 * MIB, 0.655)]


def test_an_instance_id_or_profile_that_is_not_one_is_left_out_or_null(exporter):
    labels = 'gpu="0",UUID="GPU-a",modelName="NVIDIA A100-SXM4-80GB",Hostname="a100-1"'
    exporter.body = (
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f'DCGM_FI_DEV_FB_USED{{{labels}}} 100\n'
        f'DCGM_FI_DEV_FB_USED{{{labels},GPU_I_PROFILE="1g.10gb",GPU_I_ID="x"}} 1000\n'
        f'DCGM_FI_DEV_FB_USED{{{labels},GPU_I_PROFILE="<b>1g</b>",GPU_I_ID="2"}} 2000\n'
    )
    gpu = DcgmSource(exporter.url, interval=1.0).sample()[0]["gpus"][0]

    assert gpu["mem_used"] == 100 * MIB
    (instance,) = gpu["mig"]
    assert (instance["gpu_instance"], instance["profile"], instance["mem_used"]) == (2, None, 2000 * MIB)
