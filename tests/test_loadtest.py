"""The load test machinery, run small (20 nodes, 5 s) so it cannot rot: the real command, its real JSON."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import orjson
import psutil
import pytest

from devtools.loadtest.meter import MemoryMeter
from devtools.loadtest.pruner import during, read_passes, summary

ROOT = Path(__file__).resolve().parent.parent
NODES = 20


def run_load_test(*args: str, timeout: float = 80) -> tuple[dict, str]:
    """Run the load test's real command; return its JSON result and the mark its processes' environment carried."""
    mark = uuid.uuid4().hex
    done = subprocess.run(
        [sys.executable, "-m", "devtools.loadtest", *args, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, "GPULSE_TEST_MARK": mark},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return orjson.loads(done.stdout), mark


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
    result, mark = run_load_test("--nodes", str(NODES), "--gpus-per-node", "8", "--interval", "1", "--duration", "5",
                                 "--clients", "3", "--warmup", "1")

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
    for rss in result["rss_mb"].values():  # start and end, for a soak to read whether memory grew
        assert 20 < rss["start"] <= rss["peak"] < 2000 and rss["end"] <= rss["peak"]
    assert 0 < result["redis_mb"] <= result["redis_mb_bound"]
    assert result["frames_per_client_min"] >= 4  # about one delta per second for 5 s, at each client
    assert result["clients_per_web_process"] == [3]

    # Everything it started (Redis, web, ingest, collectors) is gone with it.
    assert processes_marked(mark) == []



@pytest.mark.timeout(90)
def test_with_two_web_processes_behind_the_port_every_client_gets_every_frame():
    """As docker-compose.yml runs web (WEB_CONCURRENCY=2): the clients are spread over both processes, and
    the channel layer brings each one every frame. More clients than one user may open sockets
    (GPULSE_WS_MAX_PER_USER, 20): the load test's clients are all its one user."""
    result, _ = run_load_test("--nodes", str(NODES), "--duration", "5", "--clients", "30", "--warmup", "1",
                              "--web-processes", "2")
    assert result["web_processes"] == 2
    per_process = result["clients_per_web_process"]
    assert len(per_process) == 2 and sum(per_process) == 30, per_process
    assert result["frames_per_client_min"] >= 4 and result["dropped"] == 0

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


@pytest.mark.timeout(90)
def test_with_retention_passes_the_load_test_prunes_the_seeded_rows_and_splits_latency_by_pass():
    result, mark = run_load_test("--nodes", "4", "--gpus-per-node", "8", "--duration", "6", "--clients", "2",
                                 "--warmup", "1", "--retention", "2", "--retention-hours", "1")
    retention = result["retention"]
    gpus = 4 * 8
    # An hour of minutes per GPU before the cutoff's minute (and that one), and the minutes after it, which
    # expire while the test runs.
    expired = retention["seeded"]["expired"]
    assert expired.keys() == {"minute rollups", "GPU usage minutes"}
    assert all(60 * gpus <= rows <= 61 * gpus for rows in expired.values())
    assert all(rows > expired[kind] for kind, rows in retention["seeded"]["rows"].items())
    # Every 2 s over 6 s: the first pass does the backlog (and the hours of 14 days: the first downsampling),
    # the others what expired since.
    assert retention["passes"] >= 2 and len(retention["pass_s"]) == retention["passes"]
    for kind, rows in expired.items():
        assert retention["pruned"][kind] >= rows, kind
    # The backlog's minutes downsampled first (two clock hours at most, as the hour rarely starts on a minute).
    assert retention["hourly_rows_written"] >= gpus
    for key in ("e2e_latency_ms", "ingest_lag_ms"):
        split = result[key]
        assert split["during_passes"]["p50"] is not None and split["outside_passes"]["p50"] is not None
        assert split["during_passes"]["max"] <= split["max"] and split["outside_passes"]["max"] <= split["max"]
    assert all(rss["start"] > 20 and rss["end"] <= rss["peak"] for rss in result["rss_mb"].values())
    assert "dropped" in result
    assert processes_marked(mark) == []


def test_a_pass_still_running_when_the_window_ends_counts_as_running_until_then(tmp_path):
    log = tmp_path / "passes.jsonl"
    log.write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in (
        {"start": 10.0},
        {"start": 10.0, "end": 13.0, "done": {"hourly rows written": 8, "minute rollups": 500}},
        {"start": 20.0},
        {"start": 20.0, "end": 20.5, "done": {"hourly rows written": 0, "minute rollup partitions created": 1,
                                              "minute rollups": 40, "GPU usage minutes": 4}},
        {"start": 30.0},
    )))
    passes = read_passes(log)
    in_pass = during(passes, until=35.0)
    ts = np.array([9.9, 10.0, 12.9, 13.0, 20.2, 29.0, 30.0, 34.9, 35.0])
    assert in_pass(ts).tolist() == [False, True, True, False, True, False, True, True, False]
    assert summary(passes, every=10.0, seeded={}) == {
        "every_s": 10.0, "seeded": {}, "passes": 2, "unfinished": 1,
        "pruned": {"minute rollups": 540, "GPU usage minutes": 4}, "hourly_rows_written": 8,
        "partitions": {"minute rollup partitions created": 1}, "pass_s": [3.0, 0.5],
    }
