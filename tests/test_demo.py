"""`make demo`'s program: everything up, the URL printed, everything gone on SIGTERM."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import psutil

from devtools.redis_server import free_port
from devtools.stack import ROOT


def wait_for_health(base_url: str, done, timeout: float) -> dict:
    """Poll /healthz (200 or 503) until ``done(health)`` or the timeout; return the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            health = json.load(urllib.request.urlopen(f"{base_url}healthz", timeout=5))
        except urllib.error.HTTPError as exc:
            health = json.load(exc)
        if done(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.5)


def test_the_demo_starts_the_whole_system_and_stops_every_process_on_sigterm():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(PORT=str(port), GPULSE_SIM_NODES="2", GPULSE_SIM_GPUS="4", GPULSE_ADMIN_PASSWORD="demo-pw-1234")
    demo = subprocess.Popen([sys.executable, "-m", "devtools.demo"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any("is running at" in line for line in lines):
            assert time.monotonic() < deadline and demo.poll() is None, "".join(lines)
            lines.append(demo.stdout.readline())
        assert f"http://127.0.0.1:{port}/" in lines[-1]
        children = psutil.Process(demo.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        for part in ("redis-server", "uvicorn", "manage.py ingest", "dashboard.control_worker", "-Q webhooks",
                     "node.sim-01", "node.sim-02", "collectors"):
            assert part in names, f"{part} is not running"
        health = wait_for_health(f"http://127.0.0.1:{port}/", lambda health: health["ok"], 30)
        assert health["ok"], health
        assert "2 nodes" in health["checks"]["ingest"]["detail"]
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(30) == 0
        time.sleep(0.5)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        if demo.poll() is None:
            demo.kill()
        shutil.rmtree(ROOT / ".demo" / str(port), ignore_errors=True)


def test_a_demo_of_250_nodes_of_8_gpus_fits_in_4_gib(tmp_path):
    from devtools.stack import Stack

    stack = Stack(port=free_port(), state_dir=tmp_path, sim_nodes=250, sim_gpus=8)
    stack.start()
    try:
        health = wait_for_health(stack.url, lambda health: "250 nodes" in health["checks"]["ingest"]["detail"], 90)
        assert "250 nodes" in health["checks"]["ingest"]["detail"], health
        # One benchmark worker serves every simulated node (a worker each took ~270 MB).
        workers = [name for name, _ in stack.processes if name == "node-worker"]
        assert workers == ["node-worker"]
        rss = sum(psutil.Process(process.pid).memory_info().rss for _, process in stack.processes)
        rss += psutil.Process(stack.redis.process.pid).memory_info().rss
        assert rss < 4 * 2**30, f"{rss / 2**20:.0f} MiB"
    finally:
        stack.stop()
