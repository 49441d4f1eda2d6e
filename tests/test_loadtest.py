"""The load test machinery, run small (20 nodes, 5 s) so it cannot rot: the real command, its real JSON."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import psutil
import pytest

from devtools.loadtest.meter import MemoryMeter

ROOT = Path(__file__).resolve().parent.parent
NODES = 20


def processes_marked(mark: str) -> list[str]:
    """Return the command lines of processes whose environment carries ``mark`` (children inherit it)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.environ().get("GPULSE_TEST_MARK") == mark:
                found.append(" ".join(process.info["cmdline"] or []))
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.timeout(90)
def test_the_load_test_drives_the_whole_pipeline_and_reports_sane_numbers():
    mark = uuid.uuid4().hex
    done = subprocess.run(
        [sys.executable, "-m", "devtools.loadtest", "--nodes", str(NODES), "--gpus-per-node", "8", "--interval", "1",
         "--duration", "5", "--clients", "3", "--warmup", "1", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=80, env={**os.environ, "GPULSE_TEST_MARK": mark},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)

    assert {"samples_per_s", "expected_samples_per_s", "ingest_lag_ms", "e2e_latency_ms", "frame_bytes",
            "cpu_percent", "rss_mb", "redis_mb", "dropped"} <= result.keys()
    assert {"p50", "p99"} <= result["ingest_lag_ms"].keys() and {"p50", "p99"} <= result["e2e_latency_ms"].keys()
    assert result["cpu_percent"].keys() == result["rss_mb"].keys() == {"ingest", "web"}

    assert result["expected_samples_per_s"] == NODES
    # Counted once each, never more than were sent. Not a rate target: on a loaded 2-core machine the
    # simulated collectors fell to 16 of 20 a second over 5 s (docs/PERFORMANCE.md holds the load test's figures).
    assert NODES / 2 <= result["samples_per_s"] <= NODES * 1.05
    assert result["dropped"] == 0
    lag, e2e = result["ingest_lag_ms"], result["e2e_latency_ms"]
    assert 0 < lag["p50"] <= lag["p99"] < 5000
    # A frame reaches a client after ingest stamped it, so end to end is never shorter.
    assert lag["p50"] <= e2e["p50"] <= e2e["p99"] < 5000
    # 20 nodes x 8 GPUs: each delta carries every node's rows, a few KiB of JSON.
    assert 2_000 < result["frame_bytes"] < 50_000
    assert result["snapshot_bytes"] > result["frame_bytes"]  # the snapshot adds each GPU's meta
    assert all(0 < value < 200 for value in result["cpu_percent"].values())
    assert all(20 < value < 2000 for value in result["rss_mb"].values())
    assert 0 < result["redis_mb"] <= result["redis_mb_bound"]
    assert result["frames_per_client"] >= 4  # about one delta per second for 5 s, at each client

    # Everything it started (Redis, web, ingest, collectors) is gone with it.
    assert processes_marked(mark) == []


# A process that, after a moment, starts a child holding 200 MiB it has written to, as a node worker starts a
# benchmark job's ranks.
STARTS_A_CHILD_LATER = """
import subprocess, sys, time
time.sleep(0.5)
subprocess.run([sys.executable, "-c", "held = b'x' * (200 * 2**20); import time; time.sleep(3)"])
"""


@pytest.mark.timeout(30)
def test_the_memory_meter_counts_the_processes_a_system_starts_after_it_began():
    parent = subprocess.Popen([sys.executable, "-c", STARTS_A_CHILD_LATER])
    try:
        meter = MemoryMeter([parent.pid], every=0.2)
        meter.start()
        parent.wait(timeout=20)
        meter.stop()
    finally:
        parent.kill()
    assert meter.processes_at_peak == 2
    assert meter.peak_pss >= 200 * 2**20 and meter.peak_rss >= meter.peak_pss
    assert meter.result()["peak_pss_mib"] >= 200
