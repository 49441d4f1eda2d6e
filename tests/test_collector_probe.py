"""The periodic bandwidth probe runs real gloo ranks and lands in each node's probe stream."""

import json
import subprocess
import sys
import time

import psutil

from collectors.probe import ProbeRunner, probe_once
from devtools.stack import ROOT
from gpulse.keys import Keys


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
    me = psutil.Process()
    assert not [c for c in me.children(recursive=True) if "workers.allreduce" in " ".join(c.cmdline())]


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
                 if "workers.allreduce" in " ".join(c.cmdline())]
        time.sleep(0.2)
    assert len(ranks) == 2
    started = time.time()
    collector.terminate()
    assert collector.wait(30) == 0
    assert time.time() - started < 15
    time.sleep(0.5)
    assert not [r for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE]
