"""GPU check runs launched from the dashboard: the API and the control worker send each node's worker
its task, the worker runs `python -m workers.healthcheck` (here on the C stand-in for libnvidia-ml), and
the reaper records what each node's own stream says."""

import datetime as dt
import json
import re
import sys
import time

import pytest
from django.utils import timezone

from collectors.gpu_test_record import GpuTestRecord
from dashboard.accounts.models import AuditEvent
from dashboard.benchmarks.gpu_check_runs import settle_gpu_checks
from dashboard.benchmarks.models import BenchmarkJob, GpuCheckRun
from gpulse import job_events
from gpulse.gpu_check_report import ReportError, clean_report, run_id_of, run_key
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from tests import fake_nvml
from workers.gpu_check_task import run_healthcheck

pytestmark = pytest.mark.django_db(transaction=True)


def post(client, **fields):
    return client.post("/api/v1/gpu-checks", json.dumps(fields), content_type="application/json")


def stand_in(**config) -> dict:
    """What a node worker's environment needs to load the C stand-in for libnvidia-ml as ``config`` sets it up."""
    env = fake_nvml.subprocess_env(fake_nvml.config(**config))
    return {name: env[name] for name in ("FAKE_NVML_CONFIG", "LD_LIBRARY_PATH")}


def wait_for(run_id: int, timeout: float) -> GpuCheckRun:
    deadline = time.monotonic() + timeout
    while (run := GpuCheckRun.objects.get(pk=run_id)).status in (JobStatus.QUEUED, JobStatus.RUNNING):
        assert time.monotonic() < deadline, f"run {run_id} still {run.status}: {run.results}"
        time.sleep(0.3)
    return run


def test_a_run_checks_each_node_on_its_worker_and_records_what_each_found(
    client, operator_user, live_nodes, node_workers, control_worker, tmp_path
):
    record = tmp_path / "healthcheck.json"
    # bench-a's GPU 0 link trained at x8 of x16; bench-b is healthy. Neither stand-in GPU has CUDA behind it.
    sick = stand_in(gpus=2, pcie="5:5:8:16", pcie_on=[0], nvlinks=18, unsupported=["ecc"])
    node_workers.start("bench-a", env={**sick, "GPULSE_GPU_TEST_RECORD": str(record)})
    node_workers.start("bench-b", env=stand_in(gpus=2, nvlinks=18, unsupported=["ecc"]))
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes)
    assert response.status_code == 202, response.content
    run_id = response.json()["id"]
    assert response["Location"] == f"/api/v1/gpu-checks/{run_id}"
    run = wait_for(run_id, timeout=120)

    assert run.status == JobStatus.SUCCEEDED, run.reason  # both nodes were judged
    sick_report, healthy_report = run.results["bench-a"]["report"], run.results["bench-b"]["report"]
    assert (sick_report["exit"], healthy_report["exit"]) == (1, 0)
    failed = [(f["gpu"], f["check"]) for f in sick_report["findings"] if f["status"] == "fail"]
    assert failed == [(0, "pcie_link")]
    # The GPU tests were asked for, and say why they could not run on this machine.
    assert {(test["gpu"], test["verdict"]) for test in sick_report["tests"]} == {(None, "unknown")}
    assert all(test["reason"].startswith("not run: torch sees no CUDA device") for test in sick_report["tests"])
    # The node worker wrote its node's record, which the collector's --gpu-test-record reports as gpu_tests.
    [finding] = GpuTestRecord(record).findings()
    assert (finding["check"], finding["gpu"], finding["status"]) == ("gpu_tests", None, "unknown")
    assert "not run: torch sees no CUDA device" in finding["reason"]
    assert AuditEvent.objects.filter(action="gpu_checks.launch", target=f"GPU check run {run_id}").exists()

    page = client.get(f"/benchmarks/gpu-checks/{run_id}/").content.decode()
    assert "unhealthy" in page and "GPU 0 pcie_link fail: x8 of x16 lanes" in page
    api = client.get(f"/api/v1/gpu-checks/{run_id}").json()
    assert api["status"] == "succeeded" and api["results"]["bench-b"]["report"]["exit"] == 0


def test_launching_is_refused_without_the_permission_a_worker_or_a_free_node(
    client, operator_user, viewer_user, live_nodes
):
    client.force_login(viewer_user)
    assert post(client, nodes=live_nodes).status_code == 403
    client.force_login(operator_user)
    refused = post(client, nodes=live_nodes)
    assert refused.status_code == 409 and "no node worker on bench-a, bench-b" in refused.json()["error"]
    job = BenchmarkJob.objects.create(nodes=["bench-b"], ranks_per_node=1, min_bytes=1, max_bytes=2,
                                      status=JobStatus.RUNNING)
    refused = post(client, nodes=live_nodes)
    assert refused.status_code == 409 and f"bench-b runs job {job.pk}" in refused.json()["error"]
    assert post(client, nodes=["nowhere"]).status_code == 400
    assert not GpuCheckRun.objects.exists()


def running_run(nodes: list[str]) -> GpuCheckRun:
    return GpuCheckRun.objects.create(nodes=nodes, status=JobStatus.RUNNING, started=timezone.now())


def node_says(redis_client, run: GpuCheckRun, node: str, event: dict) -> None:
    job_events.emit(redis_client, Keys(), run.key, event, node=node)


def beat(redis_client, *nodes: str) -> None:
    for node in nodes:
        redis_client.set(Keys().worker(node), 1, ex=30)


def test_a_malformed_report_fails_its_node_and_a_partial_run_shows_each_node_as_it_reports(redis_client):
    run = running_run(["n1", "n2", "n3"])
    beat(redis_client, "n1", "n2", "n3")
    node_says(redis_client, run, "n1", {"kind": "node_done", "status": "succeeded", "reason": "",
                                        "report": {"exit": 7, "gpus": 1, "seconds": 1, "findings": [], "tests": []}})
    settle_gpu_checks(run)
    run.refresh_from_db()
    assert run.status == JobStatus.RUNNING
    assert run.results == {"n1": {"status": "failed", "report": None,
                                  "reason": "its report was malformed: 'exit' 7 is not 0 or 1"}}
    # A node's stream is its own word: n2's event naming n3 is n2's report.
    node_says(redis_client, run, "n2", {"kind": "node_done", "node": "n3", "status": "failed",
                                        "reason": "gpulse healthcheck could not check: NVML: no driver",
                                        "report": None})
    node_says(redis_client, run, "n3", {"kind": "node_done", "status": "succeeded", "reason": "",
                                        "report": {"exit": 0, "gpus": 0, "seconds": 2.5, "findings": [],
                                                   "tests": [], "extra": "<script>"}})
    settle_gpu_checks(run)
    run.refresh_from_db()
    assert run.status == JobStatus.FAILED
    assert run.reason == ("n1: its report was malformed: 'exit' 7 is not 0 or 1; "
                          "n2: gpulse healthcheck could not check: NVML: no driver")
    assert run.results["n3"]["report"] == {"exit": 0, "gpus": 0, "seconds": 2.5, "findings": [], "tests": []}


def test_a_node_whose_worker_is_gone_fails_and_a_silent_one_times_out(redis_client):
    gone = running_run(["n1"])
    settle_gpu_checks(gone)
    gone.refresh_from_db()
    assert (gone.status, gone.reason) == (JobStatus.FAILED, "n1: its node worker stopped before the run")

    silent = running_run(["n2"])
    beat(redis_client, "n2")
    node_says(redis_client, silent, "n2", {"kind": "started"})
    GpuCheckRun.objects.filter(pk=silent.pk).update(started=timezone.now() - dt.timedelta(seconds=200))
    silent.refresh_from_db()
    settle_gpu_checks(silent)
    silent.refresh_from_db()
    assert silent.status == JobStatus.TIMED_OUT
    assert silent.reason == "n2: no report within the run's 60 s limit (still running)"


def test_cancelling_a_running_run_keeps_its_reports_and_flags_the_others(client, operator_user, redis_client):
    run = running_run(["n1", "n2"])
    GpuCheckRun.objects.filter(pk=run.pk).update(created_by=operator_user)
    beat(redis_client, "n1", "n2")
    node_says(redis_client, run, "n1", {"kind": "node_done", "status": "succeeded", "reason": "",
                                        "report": {"exit": 0, "gpus": 1, "seconds": 3, "findings": [], "tests": []}})
    settle_gpu_checks(run)
    client.force_login(operator_user)
    response = client.post(f"/api/v1/gpu-checks/{run.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    run.refresh_from_db()
    assert run.reason == "cancelled by operator" and set(run.results) == {"n1"}
    assert redis_client.exists(Keys().job_node_cancel(run.key, "n2"))
    assert not redis_client.exists(Keys().job_node_cancel(run.key, "n1"))
    assert client.post(f"/api/v1/gpu-checks/{run.pk}/cancel").status_code == 409


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_the_node_side_stops_a_healthcheck_when_cancelled_or_past_its_limit():
    began = time.monotonic()
    assert run_healthcheck(SLEEPER, 60, cancelled=lambda: True) == {
        "status": "cancelled", "reason": "cancelled while running", "report": None}
    assert run_healthcheck(SLEEPER, 1, cancelled=lambda: False) == {
        "status": "failed", "reason": "still running at the run's 1 s limit: killed", "report": None}
    assert time.monotonic() - began < 20
    said = run_healthcheck([sys.executable, "-c", "print('gpulse healthcheck could not check: NVML: no driver');"
                                                  "raise SystemExit(2)"], 30, cancelled=lambda: False)
    assert said == {"status": "failed", "reason": "gpulse healthcheck could not check: NVML: no driver",
                    "report": None}


def test_the_healthchecks_own_report_passes_the_control_sides_check():
    done = run_healthcheck([sys.executable, "-m", "workers.healthcheck", "--json", "--quick", "--cpu-only"], 60,
                           cancelled=lambda: False)
    assert done["status"] == "succeeded", done
    report = clean_report(done["report"])
    assert [test["name"] for test in report["tests"]] == ["memory_bandwidth", "matmul_fp32"]
    assert all(test["value"] > 0 and test["verdict"] == "unknown" for test in report["tests"])


@pytest.mark.parametrize(("report", "why"), [
    ([], "not a JSON object"),
    ({"exit": True, "gpus": 1, "seconds": 1, "findings": [], "tests": []}, "'exit' True is not 0 or 1"),
    ({"exit": 0, "gpus": 999, "seconds": 1, "findings": [], "tests": []}, "'gpus' 999 is not a GPU count"),
    ({"exit": 0, "gpus": 1, "seconds": float("nan"), "findings": [], "tests": []}, "a value nan is not a finite"),
    ({"exit": 0, "gpus": 1, "seconds": 1, "findings": [{"check": "<b>x</b>", "gpu": 0, "status": "fail",
                                                        "reason": ""}], "tests": []},
     "a finding's check '<b>x</b>' is not a name"),
    ({"exit": 0, "gpus": 1, "seconds": 1, "findings": [], "tests": [{"name": "m", "gpu": 300, "value": 1,
                                                                     "unit": "", "verdict": "pass", "reason": ""}]},
     "a GPU index 300 is not None or 0-255"),
    ({"exit": 0, "gpus": 1, "seconds": 1, "findings": [], "tests": [{}] * 5000}, "'tests' is not a list of at most"),
])
def test_a_report_out_of_contract_is_refused_naming_why(report, why):
    with pytest.raises(ReportError, match="^" + re.escape(why)):
        clean_report(report)


def test_a_long_reason_is_cut_and_run_keys_name_only_runs():
    long = clean_report({"exit": 1, "gpus": 1, "seconds": 1, "tests": [],
                         "findings": [{"check": "pcie_link", "gpu": 0, "status": "fail", "reason": "x" * 10_000}]})
    assert len(long["findings"][0]["reason"]) == 256
    assert run_id_of(run_key(42)) == 42
    assert [run_id_of(key) for key in ("gpu-checks-0", "gpu-checks-1:x", "12", None, "gpu-checks-01")] == [None] * 5


def test_a_benchmark_is_refused_on_a_node_under_a_gpu_check_and_its_picker_says_why(client, operator_user,
                                                                                    live_nodes):
    run = GpuCheckRun.objects.create(nodes=["bench-a"], status=JobStatus.RUNNING, started=timezone.now())
    client.force_login(operator_user)
    refused = client.post("/api/v1/benchmarks", json.dumps({"nodes": live_nodes, "backend": "gloo"}),
                          content_type="application/json")
    assert refused.status_code == 409
    assert refused.json()["error"].startswith("bench-a already run a benchmark or GPU checks")
    picker = client.get("/benchmarks/").content.decode()
    assert f"running GPU check run {run.pk}" in picker
    assert BenchmarkJob.objects.count() == 0
