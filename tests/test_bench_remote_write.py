"""The remote-write benchmark (issue 35) with --outage, run tiny so it cannot rot: the real command into a real
VictoriaMetrics it stops and starts, its real JSON, what the store holds read back through its API."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.victoria_metrics import needs_victoria_metrics

ROOT = Path(__file__).resolve().parent.parent


@needs_victoria_metrics
@pytest.mark.timeout(90)
def test_the_benchmark_stops_the_store_and_finds_every_handed_sample_in_it_once_back():
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_remote_write", "--nodes", "2", "--gpus", "1", "--rounds", "2",
         "--interval", "1", "--outage", "2", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=80,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)

    assert result["rounds_during_outage"] == 2
    # the warm-up round, the two outside the outage and the two handed while the store was away
    assert result["handed_samples"] == 5 * result["samples_per_round"] > 0
    assert result["stored_samples"] == result["sent"] == result["handed_samples"]
    assert result["dropped"] == result["rejected"] == result["skipped_rounds"] == 0
    assert result["failed"] > 0  # the store was away while the writer tried
    assert 0 < result["buffer_peak_samples"] <= result["buffer_limit_samples"]
    assert result["drain_s_after_store_back"] >= 0


def test_an_outage_needs_the_store_started_here():
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_remote_write", "--outage", "5", "--url", "http://127.0.0.1:1/w"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2 and "cannot be used with --url" in done.stderr
