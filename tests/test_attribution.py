"""A GPU process's user, command, container and scheduler job (collectors/attribution.py).

The cgroup paths are the ones Slurm, the kubelet and docker write; the
recorded procfs tree (tests/data/procfs/<pid>/) holds one process per format.
"""

import pwd
from pathlib import Path

import psutil
import pytest

from collectors.attribution import describe_process, parse_cgroup
from collectors.nvml import NvmlSource
from gpulse import schema
from tests import fake_nvml
from tests.test_collector_nvml import fake_library  # noqa: F401 (fixture: the stand-in loaded, or a skip)

RECORDED = Path(__file__).resolve().parent / "data" / "procfs"
MISSING_PID = 999_999_999  # above any pid_max, so never a live process
POD = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
POD_UNDERSCORES = POD.replace("-", "_")
CONTAINER = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
LDAP_UIDS = (104231, 104587)  # the recorded tree's users: not in this machine's passwd

SLURM_V1_FILE = """\
12:pids:/system.slice/slurmd.service
11:devices:/slurm/uid_1000/job_1234/step_0/task_0
10:hugetlb:/
8:memory:/slurm/uid_1000/job_1234/step_0/task_0
3:freezer:/slurm/uid_1000/job_1234/step_0
1:name=systemd:/system.slice/slurmd.service
"""


@pytest.mark.parametrize(("text", "expected"), [
    # Slurm, cgroup/v1: the first line in a Slurm hierarchy answers
    (SLURM_V1_FILE, {"job": "1234", "step": "0"}),
    ("4:memory:/slurm/uid_1000/job_1234/step_batch/task_0\n", {"job": "1234", "step": "batch"}),
    ("4:memory:/slurm/uid_1000/job_1234/step_extern/task_0\n", {"job": "1234", "step": "extern"}),
    ("4:freezer:/slurm/uid_1000/job_1234/step_interactive\n", {"job": "1234", "step": "interactive"}),
    # Slurm, cgroup/v2, and one host running several slurmd
    ("0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n", {"job": "1234", "step": "0"}),
    ("0::/system.slice/slurmstepd.scope/job_88/step_batch/user/task_0\n", {"job": "88", "step": "batch"}),
    ("0::/system.slice/gpu-07_slurmstepd.scope/job_1234/step_3/user/task_1\n", {"job": "1234", "step": "3"}),
    # Kubernetes, cgroupfs driver: Burstable, BestEffort, Guaranteed (no QoS level); v1 and v2
    (f"11:memory:/kubepods/burstable/pod{POD}/{CONTAINER}\n", {"pod_uid": POD, "container": CONTAINER}),
    (f"7:devices:/kubepods/besteffort/pod{POD}/{CONTAINER}\n", {"pod_uid": POD, "container": CONTAINER}),
    (f"0::/kubepods/pod{POD}/{CONTAINER}\n", {"pod_uid": POD, "container": CONTAINER}),
    # Kubernetes, systemd driver: the UID's dashes become underscores in the slice name
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UNDERSCORES}.slice/"
     f"cri-containerd-{CONTAINER}.scope\n", {"pod_uid": POD, "container": CONTAINER}),
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_UNDERSCORES}.slice/"
     f"crio-{CONTAINER}.scope\n", {"pod_uid": POD, "container": CONTAINER}),
    (f"0::/kubepods.slice/kubepods-pod{POD_UNDERSCORES}.slice/docker-{CONTAINER}.scope\n",
     {"pod_uid": POD, "container": CONTAINER}),
    (f"10:memory:/kubepods.slice/kubepods-pod{POD_UNDERSCORES}.slice/cri-containerd-{CONTAINER}.scope\n",
     {"pod_uid": POD, "container": CONTAINER}),
    # Docker alone: a container, no pod
    (f"12:memory:/docker/{CONTAINER}\n1:name=systemd:/docker/{CONTAINER}\n", {"container": CONTAINER}),
    (f"0::/system.slice/docker-{CONTAINER}.scope\n", {"container": CONTAINER}),
], ids=["slurm-v1", "slurm-v1-batch", "slurm-v1-extern", "slurm-v1-interactive", "slurm-v2", "slurm-v2-batch",
        "slurm-v2-multiple-slurmd", "k8s-cgroupfs-burstable", "k8s-cgroupfs-besteffort", "k8s-cgroupfs-guaranteed",
        "k8s-systemd-burstable", "k8s-systemd-besteffort-crio", "k8s-systemd-guaranteed-docker",
        "k8s-systemd-cgroup-v1", "docker-v1", "docker-v2"])
def test_it_reads_the_job_pod_and_container_from_the_cgroup_path(text, expected):
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize("text", [
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/\n",
    "",
    "12:memory:/\n1:name=systemd:/init.scope\n",
    "0::/system.slice/slurmstepd.scope/system\n",  # slurmstepd itself, in no job
    # Crafted: text smuggled into an id, an id of the wrong shape, a known path below a user's own cgroup
    "4:memory:/slurm/uid_1/job_12;rm/step_0/task_0\n",
    "0::/system.slice/slurmstepd.scope/job_12/step_0 x/user\n",
    "0::/system.slice/slurmstepd.scope/job_1234/step_<b>/user/task_0\n",
    f"0::/kubepods/burstable/pod{POD}x/{CONTAINER}\n",
    f"0::/kubepods/burstable/pod{POD.upper()}/{CONTAINER}\n",
    f"0::/kubepods/burstable/pod{POD}/{CONTAINER}0\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-pod{POD_UNDERSCORES}.slice/cri-containerd-{CONTAINER}.scope\n",
    f"0::/docker/{CONTAINER[:12]}\n",
    "0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/uid_1/job_9/step_0\n",
    # as a collector in its own cgroup namespace sees the host's cgroups: relative, not attributed
    f"0::/../../kubepods-pod{POD_UNDERSCORES}.slice/cri-containerd-{CONTAINER}.scope\n",
])
def test_an_unknown_or_crafted_cgroup_path_is_left_unattributed(text):
    assert parse_cgroup(text) == {}


@pytest.fixture(scope="module")
def unknown_ldap_uids():
    for uid in LDAP_UIDS:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            continue
        pytest.skip(f"this machine's passwd names uid {uid}, which the recorded tree needs unknown")


# 211 characters on the node: the sample carries the contract's first 128
LONG_COMMAND = ("/usr/bin/python3 -u train.py --config configs/llama-2-13b-sft.yaml --data "
                "/lustre/projects/nlp/datasets/instruct-mix-v3 "
                "--output /lustre/scratch/a.kowalski/runs/llama-13b-sft-0412 "
                "--lr 3e-5 --micro-batch-size 4")
# pid in the recorded tree -> what the collector says about it (beside pid and mem_used)
RECORDED_PROCESSES = {
    48213: {"name": "python", "user": "104231",
            "cmd": LONG_COMMAND[:schema.MAX_TEXT],
            "job": "1234", "step": "0", "pod_uid": None, "container": None},
    51877: {"name": "python3", "user": "104587", "cmd": "python3 infer.py --checkpoint ckpt/step-9000",
            "job": "5678", "step": "batch", "pod_uid": None, "container": None},
    51990: {"name": "pt_main_thread", "user": "104587",
            "cmd": "/opt/conda/bin/python3 -u -m torch.distributed.run --nproc-per-node 8 pretrain.py",
            "job": "5679", "step": "0", "pod_uid": None, "container": None},
    60211: {"name": "python3", "user": "root",
            "cmd": "python3 -m vllm.entrypoints.openai.api_server --model /models/llama-3-8b-instruct",
            "job": None, "step": None, "pod_uid": POD, "container": CONTAINER},
    60342: {"name": "tritonserver", "user": "root",
            "cmd": "tritonserver --model-repository=/models --http-port=8000",
            "job": None, "step": None, "pod_uid": "7c6b5a49-3827-4165-9f4e-3d2c1b0a9f8e",
            "container": "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"},
    70123: {"name": "python", "user": "root", "cmd": "python /workspace/benchmark.py",
            "job": None, "step": None, "pod_uid": None,
            "container": "fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13"},
    70455: {"name": "python3", "user": "104231",
            "cmd": "/usr/bin/python3 -m ipykernel_launcher "
                   "-f /home/a.kowalski/.local/share/jupyter/runtime/kernel-1b2c.json",
            "job": None, "step": None, "pod_uid": None, "container": None},
}
GONE = {"name": None, "user": None, "cmd": None, "job": None, "step": None, "pod_uid": None, "container": None}


@pytest.mark.parametrize("pid", RECORDED_PROCESSES)
def test_a_recorded_process_is_described_from_its_procfs_files(pid, unknown_ldap_uids):
    assert describe_process(pid, 2**30, RECORDED) == {"pid": pid, "mem_used": 2**30, **RECORDED_PROCESSES[pid]}


def test_a_vanished_process_keeps_its_pid_and_memory_and_nothing_else():
    assert describe_process(MISSING_PID, 2**30, RECORDED) == {"pid": MISSING_PID, "mem_used": 2**30, **GONE}
    assert describe_process(MISSING_PID, None, RECORDED / "missing") == {"pid": MISSING_PID, "mem_used": None, **GONE}


def test_a_command_line_of_megabytes_is_read_only_as_far_as_the_sample_shows_it(tmp_path):
    folder = tmp_path / "4242"
    folder.mkdir()
    (folder / "cmdline").write_bytes(b"python\0train.py\0" + b"--flag\0" * 200_000)
    (folder / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")
    process = describe_process(4242, None, tmp_path)
    assert process["cmd"] == ("python train.py " + "--flag " * 200)[:schema.MAX_TEXT]
    assert (process["job"], process["step"]) == ("7", "0")


def test_a_live_process_is_described_from_the_real_proc():
    process = describe_process(psutil.Process().pid, None)

    assert process["name"] == psutil.Process().name()
    assert process["user"] == pwd.getpwuid(psutil.Process().uids().real).pw_name
    assert process["cmd"] == " ".join(psutil.Process().cmdline())[:schema.MAX_TEXT]


def test_the_nvml_source_attributes_every_process_and_the_sample_passes_the_contract(
        fake_library, monkeypatch, unknown_ldap_uids):  # noqa: F811
    # One recorded process per GPU, then one that is gone; GPU 0's is both compute and graphics.
    pids = [*RECORDED_PROCESSES, MISSING_PID]
    procs = [f"{gpu}:{pid}:{(gpu + 1) * 2**30}:c" for gpu, pid in enumerate(pids)] + [f"0:{pids[0]}:{2**30}:g"]
    monkeypatch.setenv("FAKE_NVML_CONFIG", fake_nvml.config(gpus=len(pids), procs=procs))
    monkeypatch.setattr(psutil, "PROCFS_PATH", psutil.PROCFS_PATH)  # the source points psutil at the recorded tree
    source = NvmlSource("gpu-07", 1.0, procfs=RECORDED)
    try:
        sample = source.sample()[0]
    finally:
        source.close()

    expected = {**RECORDED_PROCESSES, MISSING_PID: GONE}
    # The stand-in keeps no per-process utilization samples here, so each share is null, as in MIG mode.
    no_share = {"sm_util": None, "mem_util": None}
    assert [gpu["processes"] for gpu in sample["gpus"]] == [
        [{"pid": pid, "mem_used": (gpu + 1) * 2**30, **expected[pid], **no_share}] for gpu, pid in enumerate(pids)]
    assert schema.read(schema.encode(sample)) == (sample, 0)
