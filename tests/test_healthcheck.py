"""`python -m workers.healthcheck --quick` against the C stand-in for libnvidia-ml, and the per-GPU checks.

The command runs as Slurm runs it: a subprocess whose exit status and stdout are the answer. The per-GPU
checks run their CPU counterparts here; their verdicts are checked on given numbers against each model's
threshold, and their CUDA path where a GPU is present.
"""

import ctypes.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from collectors.health_checks import CHECKED
from tests import fake_nvml
from workers import gpu_checks
from workers.gpu_checks import Link, judge_matmul, judge_memory, judge_pcie, model_of
from workers.healthcheck import not_tested

ROOT = Path(__file__).resolve().parent.parent
H100_SXM = model_of("NVIDIA H100 80GB HBM3")
H100_PCIE = model_of("NVIDIA H100 PCIe")


def healthcheck(env: dict, sysfs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workers.healthcheck", "--quick", "--sysfs", str(sysfs), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stand_in(**settings) -> dict:
    return fake_nvml.subprocess_env(fake_nvml.config(**settings))


def test_a_degraded_pcie_link_and_a_down_nvlink_exit_1_naming_each_gpu_and_check(tmp_path):
    # GPU 0's link trained at x8, GPU 2 lost an NVLink, GPU 1 is healthy; the stand-in's ECC count
    # (GPU i reports i errors) is switched off to keep to these two checks.
    env = stand_in(gpus=3, pcie="5:5:8:16", pcie_on=[0], nvlinks=18, nvlink_down=[2], nvlink_down_on=[2],
                   unsupported=["ecc"])
    began = time.monotonic()
    done = healthcheck(env, tmp_path)
    assert time.monotonic() - began < 30
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "gpu 0 pcie_link fail: x8 of x16 lanes, Gen5 of Gen5",
        "gpu 2 nvlink_state fail: 1 of 18 links down, 17 up",
    ]
    assert "2 fail, 0 warn" in done.stderr


def test_a_healthy_stand_in_exits_0_and_prints_nothing_to_stdout(tmp_path):
    done = healthcheck(stand_in(gpus=1, nvlinks=18), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    assert ", 1 GPUs: 0 fail, 0 warn," in done.stderr


def test_json_lists_every_check_of_the_collector_and_the_gpu_tests_it_could_not_run(tmp_path):
    done = healthcheck(stand_in(gpus=1, nvlinks=18), tmp_path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["exit"] == 0
    assert report["checked"] == CHECKED  # the collector's checks; the GPU tests are its own
    # No CUDA device answers to the stand-in's GPU (here: no CUDA at all), so each test says why it did not run.
    assert report["tests"], report
    assert {test["verdict"] for test in report["tests"]} == {"unknown"}
    assert all(test["reason"].startswith("not run: ") for test in report["tests"])
    assert [finding["status"] for finding in report["findings"]] == ["unknown"] * len(report["tests"])


def test_skip_gpu_tests_runs_only_the_health_checks(tmp_path):
    done = healthcheck(stand_in(gpus=1, nvlinks=18), tmp_path, "--json", "--skip-gpu-tests")
    report = json.loads(done.stdout)
    assert (done.returncode, report["tests"], report["findings"]) == (0, [], [])


def test_a_warning_is_printed_and_fails_only_with_strict(tmp_path):
    env = stand_in(gpus=1, nvlinks=18, persistence=0)
    done = healthcheck(env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "gpu 0 config warn: persistence mode off\n")
    strict = healthcheck(env, tmp_path, "--strict")
    assert (strict.returncode, strict.stdout) == (1, "gpu 0 config warn: persistence mode off\n")


def test_fewer_gpus_than_expected_and_a_port_down_are_node_lines(tmp_path):
    done = healthcheck(stand_in(gpus=1, nvlinks=18), ROOT / "tests" / "data" / "sysfs", "--expected-gpus", "2")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "node gpu_count fail: 1 of 2 GPUs on the bus",
        "node ib_port fail: mlx5_1/1 DOWN/Polling",
    ]


def test_a_gpu_a_job_uses_is_not_tested():
    # Testing it would slow the job down and measure the job, not the GPU.
    busy = {"index": 0, "processes": [{"pid": 4242}, {"pid": 4243}]}
    assert not_tested(busy, out_of_time=False) == "in use by 2 processes"
    assert not_tested({**busy, "processes": [{"pid": 4242}]}, out_of_time=False) == "in use by 1 process"
    assert not_tested({**busy, "processes": []}, out_of_time=False) is None
    assert not_tested({**busy, "processes": []}, out_of_time=True) == "quick mode's 20 s were spent"


def test_a_gpu_whose_nvml_read_hangs_fails_within_the_read_deadline(tmp_path):
    began = time.monotonic()
    done = healthcheck(stand_in(gpus=2, nvlinks=18, unsupported=["ecc"], hang="1:20"), tmp_path)
    assert time.monotonic() - began < 15
    assert (done.returncode, done.stdout) == (1, "gpu 1 nvml_read fail: NVML read timed out\n")


def test_a_driver_that_is_not_loaded_exits_2_with_one_line(tmp_path):
    done = healthcheck(stand_in(init_error=9), tmp_path)
    assert done.returncode == 2
    assert done.stdout == (
        "gpulse healthcheck could not check: NVML: driver not loaded — is the nvidia kernel "
        "module loaded? (try nvidia-smi)\n"
    )


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has a real NVML")
def test_no_nvml_library_exits_2_with_one_line(tmp_path):
    env = {**stand_in(), "LD_LIBRARY_PATH": str(tmp_path)}  # an empty folder: no libnvidia-ml.so.1 anywhere
    done = healthcheck(env, tmp_path)
    assert done.returncode == 2
    assert done.stdout == (
        "gpulse healthcheck could not check: NVML: libnvidia-ml.so.1 not found — is the NVIDIA driver installed?\n"
    )


def test_help_states_the_exit_codes():
    done = subprocess.run(
        [sys.executable, "-m", "workers.healthcheck", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "0  healthy" in done.stdout and "1  unhealthy" in done.stdout and "2  could not check" in done.stdout


# ---- the per-GPU checks -------------------------------------------------------------------------


def test_the_cpu_counterparts_measure_plausible_numbers_with_units():
    memory, matmul = gpu_checks.check_cpu()
    assert (memory.name, memory.gpu, memory.unit, memory.verdict) == ("memory_bandwidth", None, "GB/s", "unknown")
    assert 0.1 < memory.value < 1000  # a memcpy of GB/s order
    assert (matmul.name, matmul.gpu, matmul.unit, matmul.verdict) == ("matmul_fp32", None, "GFLOPS", "unknown")
    assert matmul.value > 0
    assert memory.reason.startswith(f"{memory.value:.1f} GB/s")


@pytest.mark.parametrize(
    "tflops, verdict, reason",
    [
        (650.0, "pass", "650.0 TFLOPS, 66% of the H100 80GB HBM3's dense bf16 peak of 989 TFLOPS (passes at 50%)"),
        (494.5, "pass", None),  # exactly half the peak
        (494.0, "fail", "494.0 TFLOPS, 50% of the H100 80GB HBM3's dense bf16 peak of 989 TFLOPS (passes at 50%)"),
        (300.0, "fail", None),  # a GPU held at its power brake
    ],
)
def test_matmul_passes_at_half_the_models_dense_peak(tflops, verdict, reason):
    got = judge_matmul(tflops, H100_SXM)
    assert got[0] == verdict
    if reason is not None:
        assert got[1] == reason


def test_memory_bandwidth_passes_at_60_percent_of_the_models():
    assert judge_memory(2900.0, H100_SXM)[0] == "pass"
    assert judge_memory(2000.0, H100_SXM)[0] == "fail"
    assert judge_memory(2000.0, H100_PCIE)[0] == "pass"  # the PCIe card's HBM2e is slower


def test_pcie_is_judged_against_the_link_nvml_reports_else_the_models_generation_at_x16():
    assert judge_pcie(52.0, H100_SXM, Link(5, 16)) == (
        "pass",
        "52.0 GB/s, 83% of PCIe Gen5 x16's rate per direction of 63.008 GB/s (passes at 60%)",
    )
    assert judge_pcie(27.0, H100_SXM, Link(5, 16))[0] == "fail"  # a link trained at x8
    assert judge_pcie(25.0, H100_PCIE, Link(4, 16))[0] == "pass"  # a Gen5 card in a Gen4 server
    assert judge_pcie(25.0, H100_PCIE, None)[0] == "fail"


def test_an_unknown_model_gets_its_number_and_no_verdict():
    assert model_of("NVIDIA GeForce RTX 4090") is None
    assert judge_matmul(150.0, None) == (
        "unknown",
        "150.0 TFLOPS; no published figure for this GPU model: measured only",
    )
    assert judge_pcie(20.0, None, None)[0] == "unknown"


def test_models_match_the_whole_product_name():
    assert model_of("NVIDIA L40").name == "L40"
    assert model_of("NVIDIA L40S").name == "L40S"
    assert model_of("NVIDIA H200").bf16_tflops == 989.0
    assert model_of("NVIDIA A100-SXM4-80GB").memory_gbs == 2039.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_a_gpu_the_cuda_checks_say_why_they_did_not_run():
    assert gpu_checks.cuda_missing().startswith("torch sees no CUDA device (")
    results = gpu_checks.not_run(None, gpu_checks.cuda_missing())
    assert [result.name for result in results] == list(gpu_checks.CUDA_CHECKS)
    assert all(result.verdict == "unknown" and result.value is None for result in results)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_cuda_checks_measure_and_judge_each_check():
    results = gpu_checks.check_gpu(0, 0)
    assert [(result.name, result.unit) for result in results] == [
        ("memory_bandwidth", "GB/s"),
        ("host_to_device", "GB/s"),
        ("device_to_host", "GB/s"),
        ("matmul_bf16", "TFLOPS"),
    ]
    assert all(result.value > 0 and result.gpu == 0 for result in results)
    print("\n".join(result.reason for result in results))
