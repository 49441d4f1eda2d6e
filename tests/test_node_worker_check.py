"""devtools.node_worker_check on CPU, end to end: its own redis-server, a real Celery node worker, gloo ranks."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from gpulse.sweep_spec import sweep_sizes
from tests.test_loadtest import processes_marked

ROOT = Path(__file__).resolve().parent.parent


def run_check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    """Run the check; return how it ended, its JSON, and the processes it left behind (none, it should)."""
    mark = uuid.uuid4().hex
    report = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, "-m", "devtools.node_worker_check", "--node", "check-01", "--json", str(report), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "GPULSE_TEST_MARK": mark},
    )
    return done, json.loads(report.read_text()), processes_marked(mark)


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_job_through_the_node_worker_succeeds_on_gloo_with_its_rows_streamed(tmp_path, pool):
    done, report, left = run_check(tmp_path, "--pool", pool, "--max-bytes", "1M", "--iters", "2", "--warmup", "1")

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["status"] == "succeeded" and report["wrong"] == 0
    assert report["backend"] == "gloo" and report["ranks_per_node"] == 1  # auto, resolved by the node without GPUs
    assert report["heartbeat"]["pid"] == report["worker_pid"]
    kinds = [event["kind"] for event in report["events"]]
    assert kinds[0] == "started" and kinds[-1] == "node_done"
    sizes = sweep_sizes(8, 1 << 20, 2, 4)
    assert [row["size"] for row in report["rows"] if row["inplace"]] == sizes
    assert report["rows_streamed"] == report["rows"]  # rank 0's rows, as the job page receives them
    assert report["versions"]["torch"] == torch.__version__
    assert "# Out of bounds values : 0 OK" in done.stdout
    assert "status: succeeded, #wrong 0" in done.stdout
    assert "succeeded in" in report["worker_log"] and "WorkerLostError" not in report["worker_log"]
    assert not left, left  # the worker, its pool and ranks, and redis-server are gone


@pytest.mark.skipif(torch.cuda.is_available(), reason="nccl runs on a GPU node: this checks a failure without one")
def test_a_failed_job_exits_1_with_the_nodes_reason_and_the_workers_log(tmp_path):
    done, report, left = run_check(tmp_path, "--backend", "nccl", "--max-bytes", "1K")

    assert done.returncode == 1
    assert report["status"] == "failed"
    reason = "backend nccl needs CUDA GPUs and this node has none: use gloo or auto"
    assert report["reason"] == reason and reason in done.stdout
    assert "## the node worker's log" in done.stderr and "node.check-01" in done.stderr
    assert not left, left

