"""A node's GPU test results feed its health (issue 38): `workers.healthcheck --record` writes them, the
collector's --gpu-test-record reports them as the check gpu_tests until a later run passes."""

import calendar
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.gpu_test_record import GpuTestRecord, write_record
from collectors.health_checks import HealthChecks
from dashboard.health.node_health import NodeHealthBook
from dashboard.reliability import components
from gpulse import health
from gpulse.schema import parse
from tests import fake_nvml
from tests.test_node_health import up

ROOT = Path(__file__).resolve().parent.parent
WRITTEN = calendar.timegm((2026, 11, 28, 3, 0, 0))


def result(name: str, gpu: int | None, verdict: str, reason: str) -> dict:
    """A workers.gpu_checks Result as the healthcheck records it."""
    return {"name": name, "gpu": gpu, "value": None, "unit": "GB/s", "verdict": verdict, "reason": reason}


SLOW_MEMORY = result("memory_bandwidth", 1, "fail", "1200.0 GB/s, 36 % of the H100 SXM's 3350 (passes at 80%)")
SLOW_MATMUL = result("matmul_bf16", 1, "fail", "310.0 TFLOPS, 31 % of the H100 SXM's 989 (passes at 60%)")
UNRUN = result("host_to_device", 2, "unknown", "not run: in use by 1 process")
PASSED = [result(name, gpu, "pass", "fine") for gpu in range(3) for name in ("memory_bandwidth", "matmul_bf16")]


def test_a_failed_gpu_is_one_finding_naming_its_tests_and_a_later_pass_clears_it(tmp_path):
    path = tmp_path / "healthcheck.json"
    record = GpuTestRecord(path)
    assert record.findings() == [{"check": "gpu_tests", "gpu": None, "status": "unknown",
                                  "reason": f"no run recorded yet at {path}"}]

    write_record(path, [*PASSED[:2], SLOW_MEMORY, SLOW_MATMUL, UNRUN], now=WRITTEN)
    assert path.stat().st_mode & 0o777 == 0o644  # the collector runs as another user than the check
    assert record.findings() == [
        {"check": "gpu_tests", "gpu": 1, "status": "fail",
         "reason": f"memory_bandwidth {SLOW_MEMORY['reason']}; matmul_bf16 {SLOW_MATMUL['reason']} "
                   "(run 2026-11-28 03:00 UTC)"},
        {"check": "gpu_tests", "gpu": 2, "status": "unknown",
         "reason": "host_to_device not run: in use by 1 process (run 2026-11-28 03:00 UTC)"},
    ]
    write_record(path, PASSED, now=WRITTEN + 3600)
    assert record.findings() == []


@pytest.mark.parametrize(("content", "why"), [
    (b"{", "not JSON"),
    (b'{"v": 2, "ts": 1, "tests": []}', "not a version 1 record"),
    (b'{"v": 1, "ts": NaN, "tests": []}', "'ts' is not a unix time"),
    (b'{"v": 1, "ts": 1, "tests": {}}', "'tests' is not a list"),
    (b'{"v": 1, "ts": 1, "tests": [{"name": "x", "gpu": -1, "verdict": "fail", "reason": ""}]}', "a test without"),
    (b'{"v": 1, "ts": 1, "tests": [{"name": "x", "gpu": 0, "verdict": "broken", "reason": ""}]}', "a test without"),
    (b" " * (300 * 1024), "larger than 256 KiB"),
])
def test_a_bad_record_is_one_unknown_finding_saying_what_is_wrong(tmp_path, content, why):
    path = tmp_path / "healthcheck.json"
    path.write_bytes(content)
    [finding] = GpuTestRecord(path).findings()
    assert (finding["gpu"], finding["status"]) == (None, "unknown")
    assert finding["reason"].startswith(f"{path} is not a GPU test record: {why}")


def test_the_collector_checks_gpu_tests_only_where_it_is_given_a_record(tmp_path):
    sample = {"v": 1, "node": "gpu-07", "ts": WRITTEN, "interval": 1.0, "gpus": []}
    HealthChecks().annotate(sample, WRITTEN)
    assert "gpu_tests" not in sample["health"]["checked"]
    write_record(tmp_path / "r.json", [SLOW_MEMORY], now=WRITTEN)
    HealthChecks(gpu_tests=GpuTestRecord(tmp_path / "r.json")).annotate(sample, WRITTEN)
    assert "gpu_tests" in sample["health"]["checked"]
    assert [(f["gpu"], f["status"]) for f in sample["health"]["findings"] if f["check"] == "gpu_tests"] == [(1, "fail")]


def collector_sample(env: dict, record: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "collectors", "--source", "nvml", "--node-name", "gpu-07", "--once",
                           "--stdout", "--gpu-test-record", str(record)], cwd=ROOT, env=env, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return parse(done.stdout)


def test_what_the_healthcheck_records_the_collector_reports_and_node_health_judges(tmp_path):
    # The stand-in's ECC count (GPU i reports i errors) is switched off: only the GPU tests fail here.
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=3, nvlinks=18, unsupported=["ecc"]))
    record = tmp_path / "healthcheck.json"
    done = subprocess.run([sys.executable, "-m", "workers.healthcheck", "--quick", "--sysfs", str(tmp_path),
                           "--record", str(record)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # No CUDA here: the tests are recorded as not run (for the node), which the collector reports as unknown.
    sample = collector_sample(env, record)
    [tests] = [f for f in sample["health"]["findings"] if f["check"] == "gpu_tests"]
    assert (tests["gpu"], tests["status"]) == (None, "unknown") and "not run: " in tests["reason"]

    # A run whose GPU 1 failed (recorded as a GPU node's run writes it): failing, counted against the GPU.
    write_record(record, [*PASSED, SLOW_MEMORY])
    sample = collector_sample(env, record)
    book = NodeHealthBook()
    book.update("gpu-07", sample)
    book.tick(WRITTEN, up("gpu-07"), [])
    node = book.nodes["gpu-07"]
    assert node.verdict == health.FAILING
    assert node.summary()["reason"].startswith(f"GPU 1 GPU tests: memory_bandwidth {SLOW_MEMORY['reason']}")
    [(check, gpu, _)] = [key for key in node.findings if key[2] == health.FAIL]
    assert components.component(check, node.findings[(check, gpu, health.FAIL)].reason) == components.GPU


def test_a_record_that_cannot_be_written_is_said_and_the_node_is_still_judged(tmp_path):
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=1, nvlinks=18))
    done = subprocess.run([sys.executable, "-m", "workers.healthcheck", "--quick", "--sysfs", str(tmp_path),
                           "--record", str(tmp_path / "missing" / "r.json")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"could not write the record {tmp_path / 'missing' / 'r.json'}" in done.stderr
