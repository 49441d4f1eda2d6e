"""The periodic bandwidth probe runs real gloo ranks and lands in each node's probe stream."""

import json
import subprocess
import sys
import time

import psutil
import pytest

from collectors import probe
from collectors.probe import ProbeRunner, probe_once
from devtools.stack import ROOT
from gpulse.keys import Keys
from tests.processes import assert_gone, descendants


def test_one_probe_measures_real_bandwidth():
    record = probe_once("sim-01", max_bytes=64 << 10, ranks=2, timeout=60)
    assert record["status"] == "succeeded", record["reason"]
    assert record["backend"] == "gloo" and record["world_size"] == 2
    assert record["busbw"] > 0 and record["wrong"] == 0


def test_the_runner_probes_each_node_into_the_stream_and_history(redis_client, redis_url):
    runner = ProbeRunner(["sim-01", "sim-02"], interval=0.2, redis_url=redis_url, max_bytes=64 << 10, ranks=2)
    runner.start()
    keys = Keys()
    deadline = time.time() + 60
    streams = [keys.probe_stream(node) for node in ("sim-01", "sim-02")]
    while not all(redis_client.xlen(stream) for stream in streams) and time.time() < deadline:
        time.sleep(0.2)
    runner.stop()
    for node, stream in zip(("sim-01", "sim-02"), streams, strict=True):
        assert json.loads(redis_client.xrange(stream)[0][1][b"p"])["node"] == node
    latest = json.loads(redis_client.lindex(keys.probe_history("sim-01"), 0))
    assert latest["status"] == "succeeded" and latest["busbw"] > 0
    # A probe cancelled by stop() stops its ranks before it ends; once, in a whole CI run, two still read
    # "running" at once: wait for them as for any process sent a signal on a busy machine.
    assert_gone(descendants("workers.collective"))


def test_the_collector_stops_promptly_even_mid_probe(redis_url, redis_client):
    collector = subprocess.Popen(
        [sys.executable, "-m", "collectors", "--source", "simulated", "--nodes", "1", "--gpus-per-node", "2",
         "--redis-url", redis_url, "--probe-interval", "0.5", "--probe-max-bytes", str(256 << 20)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 30
    ranks = []
    while len(ranks) < 2 and time.time() < deadline:  # the probe's ranks start a 256 MiB sweep
        ranks = [c for c in psutil.Process(collector.pid).children(recursive=True)
                 if "workers.collective" in " ".join(c.cmdline())]
        time.sleep(0.2)
    assert len(ranks) == 2
    started = time.time()
    collector.terminate()
    assert collector.wait(30) == 0
    assert time.time() - started < 15
    assert_gone(ranks)


# A stand-in for `python -m workers.probe` that starts a rank-like child, notes its pid, and hangs: a probe
# stuck in a CUDA or NCCL call never ends itself at its timeout.
STUCK = ("import subprocess, sys, time; rank = subprocess.Popen(['sleep', '600']);"
         " open(sys.argv[1], 'w').write(str(rank.pid)); time.sleep(600)")


def test_a_probe_stuck_past_its_timeout_is_killed_with_its_ranks(monkeypatch, tmp_path):
    pid_file = tmp_path / "rank.pid"
    monkeypatch.setattr(probe, "PROBE_COMMAND", (sys.executable, "-c", STUCK, str(pid_file)))
    monkeypatch.setattr(probe, "KILL_AFTER_S", 1.0)
    started = time.monotonic()
    with pytest.raises(probe.ProbeFailed) as failed:
        probe.probe_once("sim-01", max_bytes=64 << 10, ranks=2, timeout=1.0)
    assert str(failed.value) == ("python -m workers.probe: still running 1 s past its 1 s timeout: "
                                 "killed with its ranks")
    assert time.monotonic() - started < 30  # not the 600 s it would hang
    rank = int(pid_file.read_text())
    if psutil.pid_exists(rank):
        assert_gone([psutil.Process(rank)], timeout=10)


@pytest.mark.parametrize(("last_line", "shown"), [
    ("Traceback? no: a stray print", "'Traceback? no: a stray print'"),
    ('{"node": "sim-02", "status": "succeeded"}', "'{\"node\": \"sim-02\", \"status\": \"succeeded\"}'"),
    ('["sim-01"]', "'[\"sim-01\"]'"),
])
def test_a_last_line_that_is_not_this_nodes_record_is_an_error_saying_so(monkeypatch, last_line, shown):
    monkeypatch.setattr(probe, "PROBE_COMMAND", (sys.executable, "-c", f"print({last_line!r})"))
    with pytest.raises(probe.ProbeFailed) as failed:
        probe.probe_once("sim-01", max_bytes=64 << 10, ranks=2, timeout=10)
    assert str(failed.value) == f"python -m workers.probe: its last line is not a record of sim-01's probe: {shown}"


def test_a_failed_probe_is_logged_and_the_runner_goes_on(monkeypatch, redis_url, caplog):
    monkeypatch.setattr(probe, "PROBE_COMMAND", (sys.executable, "-c", "print('no record')"))
    runner = ProbeRunner(["sim-01"], interval=60, redis_url=redis_url, max_bytes=64 << 10, ranks=2)
    runner.probe("sim-01")
    assert "probe of sim-01 could not run: python -m workers.probe: its last line is not a record" in caplog.text
