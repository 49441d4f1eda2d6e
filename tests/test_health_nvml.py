"""Node health end to end on the node: the real NVML binding against the C stand-in, the collector's
checks, and the sample it prints. Each check reads the values the stand-in was given; a call the stand-in
answers NOT_SUPPORTED makes its check unknown, never pass."""

import subprocess
import sys
from pathlib import Path

import pytest

from collectors.health_checks import CHECKED
from gpulse.health import CHECK_IDS
from gpulse.schema import parse
from tests import fake_nvml

ROOT = Path(__file__).resolve().parent.parent
SYSFS_ALL_UP = ROOT / "tests" / "data" / "sysfs"  # mlx5_0/1 ACTIVE, mlx5_1/1 DOWN


def health_of(config: str, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "collectors", "--source", "nvml", "--node-name", "gpu-07", "--once", "--stdout",
         *args], cwd=ROOT, env=fake_nvml.subprocess_env(config), capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    return parse(result.stdout)["health"]


def found(health: dict) -> set[tuple]:
    return {(finding["check"], finding["gpu"], finding["status"]) for finding in health["findings"]}


def test_a_healthy_stand_in_passes_every_check_it_can_read():
    # GPU i reports i uncorrectable ECC errors, so GPU 0 is the healthy one.
    health = health_of(fake_nvml.config(gpus=1, nvlinks=18))
    assert health["checked"] == CHECKED  # every GPU and node check (gpu_tests only with a record)
    assert health["findings"] == []


@pytest.mark.parametrize("settings, args, expected", [
    ({"pcie": "5:5:8:16"}, [], ("pcie_link", 0, "fail", "x8 of x16 lanes, Gen5 of Gen5")),
    ({"pcie": "3:5:16:16"}, [], ("pcie_link", 0, "warn", "x16 of x16 lanes, Gen3 of Gen5 while busy (90 %)")),
    ({"remapped": "2:1:1:0"}, [], ("row_remap", 0, "warn",
                                   "a row remap waits for a GPU reset (rows remapped: 1 for uncorrectable errors, "
                                   "2 for correctable)")),
    ({"remapped": "0:4:0:1"}, [], ("row_remap", 0, "fail",
                                   "row remapping failed (rows remapped: 4 for uncorrectable errors, "
                                   "0 for correctable)")),
    ({"unsupported": ["remap"], "retired": "40:21:0"}, [], ("retired_pages", 0, "fail",
                                                            "61 pages retired (the limit is 60)")),
    ({"ecc_mode": "1:0"}, [], ("ecc_mode", 0, "warn", "an ECC mode change waits for a reboot")),
    ({"gpus": 2}, ["--expected-gpus", "2"], ("ecc_uncorrected", 1, "fail",
                                             "1 uncorrectable ECC errors since the driver loaded")),
    ({"nvlinks": 18, "nvlink_down": [2]}, [], ("nvlink_state", 0, "fail", "1 of 18 links down, 17 up")),
    ({"xid": "0:79"}, [], ("xid", 0, "fail", None)),
    ({"throttle": "0x8"}, [], ("clocks", 0, "warn", "hardware slowdown while busy (90 %)")),
    ({"persistence": 0}, [], ("config", 0, "warn", "persistence mode off")),
    ({"gpus": 1}, ["--expected-gpus", "2"], ("gpu_count", None, "fail", "1 of 2 GPUs on the bus")),
    ({}, ["--sysfs", str(SYSFS_ALL_UP)], ("ib_port", None, "fail", "mlx5_1/1 DOWN/Polling")),
], ids=lambda value: value[0] if isinstance(value, tuple) else None)
def test_each_check_reads_what_the_stand_in_was_given(settings, args, expected):
    health = health_of(fake_nvml.config(**{"gpus": 1, **settings}), *args)
    check, gpu, status, reason = expected
    finding = next(f for f in health["findings"] if (f["check"], f["gpu"]) == (check, gpu))
    assert finding["status"] == status
    if reason is not None:
        assert finding["reason"] == reason
    assert finding["check"] in CHECK_IDS


@pytest.mark.parametrize("unsupported, check", [
    (["pcie_width"], "pcie_link"),
    (["pcie_gen"], "pcie_link"),
    (["pcie_replay"], "pcie_replay"),
    (["remap", "retired", "retired_pending"], "row_remap"),
    (["remap", "retired", "retired_pending"], "retired_pages"),
    (["ecc_mode"], "ecc_mode"),
    (["ecc"], "ecc_uncorrected"),
    (["nvlink_state"], "nvlink_state"),
    (["nvlink_errors"], "nvlink_errors"),
    (["events"], "xid"),
    (["throttle"], "clocks"),
    (["persistence", "compute_mode", "mig"], "config"),
])
def test_a_call_the_driver_does_not_support_makes_its_check_unknown(unsupported, check):
    for gpus in (1, 2):  # one GPU: a finding for it; every GPU of the node: one finding for the node
        health = health_of(fake_nvml.config(gpus=gpus, nvlinks=18, unsupported=unsupported), "--expected-gpus",
                           str(gpus))
        statuses = {(gpu, status) for name, gpu, status in found(health) if name == check}
        assert statuses == ({(0, "unknown")} if gpus == 1 else {(None, "unknown")}), health["findings"]
