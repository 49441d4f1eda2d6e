"""Real sweeps: ranks as child processes, gloo over loopback, a real rendezvous."""

import os
import signal
import socket
import threading
import time

import psutil
import pytest
import torch

from gpulse.job_status import JobStatus
from gpulse.sweep_spec import SweepSpec
from workers.launcher import run_node

SMALL = {"backend": "gloo", "min_bytes": 1024, "max_bytes": 16384, "warmup": 1, "iters": 3}


def rank_processes(launcher_pid: int) -> list[psutil.Process]:
    """Return the rank processes a launcher started, wherever they now live."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "workers.collective" in cmdline and "--parent-pid" in cmdline:
            if cmdline[cmdline.index("--parent-pid") + 1] == str(launcher_pid):
                found.append(proc)
    return found


@pytest.fixture(autouse=True)
def no_rank_left_behind():
    yield
    assert rank_processes(os.getpid()) == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_gloo_ranks_reduce_correctly_and_stream_their_rows():
    streamed = []
    result = run_node(SweepSpec(ranks_per_node=2, **SMALL), on_row=streamed.append)

    assert result.status == JobStatus.SUCCEEDED and result.reason is None
    assert streamed == result.rows
    assert [(row.size, row.inplace) for row in result.rows] == [
        (size, inplace) for size in (1024, 2048, 4096, 8192, 16384) for inplace in (False, True)]
    for row in result.rows:
        assert row.wrong == 0
        assert row.count == row.size // 4 and row.type == "float" and row.redop == "sum"
        assert row.time_us > 0
        assert row.algbw == pytest.approx(row.size / (row.time_us * 1e-6) / 1e9)
        assert row.busbw == pytest.approx(row.algbw)  # 2(n-1)/n = 1 for two ranks
    assert result.spec.world_size == 2 and result.spec.backend == "gloo"
    assert result.versions["torch"] == torch.__version__
    assert set(result.versions) == {"torch", "nccl", "cuda", "driver", "python", "hostname"}


def test_a_corrupted_rank_buffer_is_counted_as_wrong():
    result = run_node(SweepSpec(ranks_per_node=2, corrupt_rank=1, **SMALL))

    assert result.status == JobStatus.SUCCEEDED
    # One element off, seen by both ranks after the reduction.
    assert [row.wrong for row in result.rows] == [2] * len(result.rows)


def test_half_precision_sums_are_checked_exactly():
    # bfloat16 goes through the same path in the CLI's JSON test.
    result = run_node(SweepSpec(ranks_per_node=2, dtype="float16", **SMALL))

    assert result.status == JobStatus.SUCCEEDED
    assert {row.type for row in result.rows} == {"half"}
    assert [row.count for row in result.rows][:2] == [512, 512]
    assert all(row.wrong == 0 for row in result.rows)


def test_one_rank_reports_zero_busbw_and_no_count_when_unchecked():
    result = run_node(SweepSpec(ranks_per_node=1, check=False, **SMALL))

    assert result.status == JobStatus.SUCCEEDED
    assert all(row.busbw == 0 and row.algbw > 0 and row.wrong is None for row in result.rows)


def test_a_killed_rank_fails_the_job_with_its_reason():
    def kill_rank_one(row):
        if len(killed) == 0:
            (victim,) = [proc for proc in rank_processes(os.getpid())
                         if proc.cmdline()[proc.cmdline().index("--local-rank") + 1] == "1"]
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)

    killed = []
    spec = SweepSpec(ranks_per_node=2, timeout=60, **{**SMALL, "max_bytes": 1 << 20})
    result = run_node(spec, on_row=kill_rank_one)

    assert result.status == JobStatus.FAILED
    assert result.reason.startswith("rank 1 exited with code -9 (SIGKILL)")
    assert result.duration_s < 40  # not the sweep's 60 s timeout


def test_a_node_that_never_comes_times_out_with_who_is_missing():
    port = free_port()
    # Long enough for the local rank to start (importing torch) and arrive, on a busy machine too: in a whole
    # CI run 4 s were not, and the local rank was missing as well.
    spec = SweepSpec(nnodes=2, node_rank=0, ranks_per_node=1, master_port=port, timeout=15, **SMALL)
    began = time.monotonic()
    result = run_node(spec)

    assert result.status == JobStatus.TIMED_OUT
    assert result.reason == f"timed out after 15 s waiting for 1 of 2 ranks to join the rendezvous at 127.0.0.1:{port}"
    assert 15 <= time.monotonic() - began < 40


def test_a_node_whose_master_never_comes_times_out():
    port = free_port()
    spec = SweepSpec(nnodes=2, node_rank=1, ranks_per_node=1, master_port=port, timeout=1, **SMALL)
    result = run_node(spec)

    assert result.status == JobStatus.TIMED_OUT
    assert result.reason == f"timed out after 1 s waiting for the rendezvous at 127.0.0.1:{port}"
    assert result.duration_s < 15


def test_cancel_stops_the_ranks_promptly():
    cancel = threading.Event()
    cancelled_at = []

    def cancel_on_first_row(row):
        if not cancel.is_set():
            cancel.set()
            cancelled_at.append(time.monotonic())

    spec = SweepSpec(ranks_per_node=2, timeout=60, **{**SMALL, "max_bytes": 1 << 20, "iters": 20})
    result = run_node(spec, on_row=cancel_on_first_row, cancel=cancel)

    assert result.status == JobStatus.CANCELLED
    assert result.reason == "cancelled before the sweep finished"
    assert len(result.rows) < 22  # cancel is asked after each row, not only twice a second
    assert time.monotonic() - cancelled_at[0] < 20  # not the sweep's 60 s timeout


def test_a_rendezvous_port_in_use_fails_clearly():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_node(SweepSpec(nnodes=2, ranks_per_node=1, master_port=port, **SMALL))

    assert result.status == JobStatus.FAILED
    assert result.reason.startswith(f"cannot host the rendezvous on port {port}: ")
    assert "address already in use" in result.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has GPUs")
def test_nccl_without_gpus_fails_with_a_reason():
    result = run_node(SweepSpec(backend="nccl", ranks_per_node=1))

    assert result.status == JobStatus.FAILED
    assert result.reason == "backend nccl needs CUDA GPUs and this node has none: use gloo or auto"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA GPUs")
def test_nccl_ranks_one_per_gpu_reduce_correctly():
    result = run_node(SweepSpec(backend="auto", min_bytes=1024, max_bytes=1 << 20, warmup=1, iters=3))

    assert result.status == JobStatus.SUCCEEDED
    assert result.spec.backend == "nccl" and result.spec.ranks_per_node == torch.cuda.device_count()
    assert result.versions["nccl"] and result.versions["cuda"]
    assert all(row.wrong == 0 for row in result.rows)
