"""MIG instances from the nvml source, against the fake libnvidia-ml.so.1 through the real binding.

The fake (tests/fake_nvml/fake_nvml.c) follows the NVML header: a GPU with MIG on
has 7 MIG device slots, an empty one answers NOT_FOUND; a MIG device at GPU
instance GI, compute instance CI reads memory total 10200547328 + GI GiB, used
512 + 8*GI + CI MiB (v2), UUID MIG-fa4e0000-<gpu>-4000-8000-<GI><CI>, name
"<GPU name> MIG <profile>", and GPM activity half GPU 0's default plus GI
(SM 35+GI %...). On a GPU with MIG on, utilization answers NOT_SUPPORTED.
"""

import os

import pytest

from collectors import nvml
from gpulse import schema
from tests import fake_nvml, test_collector_nvml
from tests.test_collector_nvml import MISSING_PID, only_sample
from tests.test_pod_resources import answering, kubelet, response

fake_library = test_collector_nvml.fake_library
open_source = test_collector_nvml.open_source

GIB = 1 << 30
MIB = 1 << 20
# Slots 0, 2 and 5 in use (1 and 3-4 emptied by destroyed instances): GI 1 (3g.40gb), GI 5 with two
# compute instances sharing it (1c.2g.20gb each, in slots 2 and 5).
LAYOUT = ["0:0:1:0:3g.40gb", "0:2:5:0:1c.2g.20gb", "0:5:5:1:1c.2g.20gb"]


def mig_gpu(**settings):
    return {"gpus": 1, "mig": "1:1", "mig_devices": LAYOUT, **settings}


def activity(reading: dict) -> dict:
    return {name: reading[name] for name in schema.ACTIVITY_METRIC_NAMES}


def default_instance_activity(gpu_instance: int) -> dict:
    percent = (80, 70, 40, 50, 45, 4, 1, 60, 2, 20, 8)
    return {name: round((value / 2 + gpu_instance) / 100, 4)
            for name, value in zip(schema.ACTIVITY_METRIC_NAMES, percent, strict=True)}


def memory(gpu_instance: int, compute_instance: int) -> dict:
    return {"mem_total": 10200547328 + gpu_instance * GIB,
            "mem_used": 512 * MIB + (8 * gpu_instance + compute_instance) * MIB}


def test_each_instance_is_reported_with_its_ids_profile_uuid_memory_and_activity(open_source):
    sample = only_sample(open_source(**mig_gpu()))
    (gpu,) = sample["gpus"]

    assert [(i["gpu_instance"], i["compute_instance"], i["profile"]) for i in gpu["mig"]] == [
        (1, 0, "3g.40gb"), (5, 0, "1c.2g.20gb"), (5, 1, "1c.2g.20gb")]
    first = gpu["mig"][0]
    assert first["uuid"] == "MIG-fa4e0000-0000-4000-8000-000001000000"
    assert {k: first[k] for k in ("mem_total", "mem_used")} == memory(1, 0)
    assert {k: gpu["mig"][2][k] for k in ("mem_total", "mem_used")} == memory(5, 1)
    assert activity(first) == default_instance_activity(1)
    # compute instances of one GPU instance share its activity
    assert activity(gpu["mig"][1]) == activity(gpu["mig"][2]) == default_instance_activity(5)
    assert schema.parse(schema.encode(sample)) == sample


def test_the_parent_keeps_its_board_readings_and_its_utilization_is_null_never_zero(open_source):
    (gpu,) = only_sample(open_source(**mig_gpu()))["gpus"]

    assert gpu["mig_enabled"] is True
    assert gpu["util"] is None and gpu["mem_util"] is None
    assert (gpu["temp"], gpu["power"], gpu["mem_total"]) == (60, 612.4, 85520809984)
    assert gpu["sm_active"] == 0.7  # the whole GPU's GPM


def test_configured_instance_activity_and_a_metric_gpm_does_not_give_is_null(open_source):
    (gpu,) = only_sample(open_source(**mig_gpu(gpm_mig=["0:5:96:12:6:na"])))["gpus"]

    instance = gpu["mig"][1]
    assert (instance["gr_active"], instance["sm_active"], instance["sm_occupancy"]) == (0.96, 0.12, 0.06)
    assert instance["tensor_active"] is None


def test_each_instance_lists_its_own_processes_with_their_owners(open_source):
    me = os.getpid()
    source = open_source(**mig_gpu(procs=[f"0:{me}:1073741824:c:5:1", f"0:{MISSING_PID}:na:c:1:0"]))
    (gpu,) = only_sample(source)["gpus"]

    by_ids = {(i["gpu_instance"], i["compute_instance"]): i["processes"] for i in gpu["mig"]}
    (mine,) = by_ids[(5, 1)]
    assert mine["pid"] == me and mine["mem_used"] == 1073741824 and mine["user"] is not None
    assert by_ids[(5, 0)] == []
    assert [p["pid"] for p in by_ids[(1, 0)]] == [MISSING_PID]
    # the GPU lists every instance's processes, so a reader that knows no MIG still sees it held
    assert sorted(p["pid"] for p in gpu["processes"]) == sorted([me, MISSING_PID])


def test_a_gpu_with_mig_on_and_no_instances_reports_an_empty_list(open_source):
    (gpu,) = only_sample(open_source(gpus=1, mig="1:1"))["gpus"]
    assert gpu["mig"] == [] and gpu["processes"] == []


def test_a_gpu_without_mig_has_no_instance_list(open_source):
    gpu0, gpu1 = only_sample(open_source(**mig_gpu(gpus=2, mig_on=[0])))["gpus"]
    assert len(gpu0["mig"]) == 3
    assert "mig" not in gpu1 and gpu1["util"] == 91


def test_a_gpu_that_cannot_tell_its_mig_mode_reports_no_instances(open_source):
    (gpu,) = only_sample(open_source(**mig_gpu(unsupported=["mig"])))["gpus"]
    assert gpu["mig_enabled"] is None and "mig" not in gpu


def test_without_gpm_the_instances_activity_is_null_and_the_rest_reported(open_source):
    (gpu,) = only_sample(open_source(**mig_gpu(unsupported=["gpm"])))["gpus"]
    assert all(activity(i) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES) for i in gpu["mig"])
    assert [i["mem_used"] for i in gpu["mig"]] == [memory(1, 0)["mem_used"], memory(5, 0)["mem_used"],
                                                   memory(5, 1)["mem_used"]]


def test_the_layout_is_found_again_after_the_layout_interval(open_source, fake_library, monkeypatch):
    source = open_source(**mig_gpu())
    assert len(only_sample(source)["gpus"][0]["mig"]) == 3

    # An administrator destroys slot 0's instance and makes one in slot 6.
    fake_nvml.configure(fake_library, fake_nvml.config(**mig_gpu(mig_devices=LAYOUT[1:] + ["0:6:13:0:1g.10gb"])))
    monkeypatch.setattr(nvml, "MIG_LAYOUT_INTERVAL", 0.0)
    (gpu,) = only_sample(source)["gpus"]

    assert [(i["gpu_instance"], i["compute_instance"]) for i in gpu["mig"]] == [(5, 0), (5, 1), (13, 0)]
    assert gpu["mig"][2]["profile"] == "1g.10gb"


def test_a_pod_given_a_mig_device_is_its_instances_owner(open_source):
    mig_uuid = "MIG-fa4e0000-0000-4000-8000-000005000001"  # the stand-in's GPU 0, GI 5, CI 1
    answer = answering(response(("notebooks", "jupyter-alice", "lab", [mig_uuid])))
    with kubelet(answer) as socket:
        (gpu,) = only_sample(open_source(**mig_gpu(), pod_resources=socket))["gpus"]

    assert gpu["mig"][2]["uuid"] == mig_uuid
    assert gpu["mig"][2]["k8s"] == {"namespace": "notebooks", "pod": "jupyter-alice", "container": "lab"}
    assert "k8s" not in gpu["mig"][0] and "k8s" not in gpu  # the GPU is not the pod's: one instance is


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
    ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
    ("NVIDIA H100 80GB HBM3", None),
    (None, None),
])
def test_the_profile_is_the_mig_device_names_suffix_as_nvidia_smi_lists_it(name, profile):
    assert nvml.mig_profile(name) == profile
