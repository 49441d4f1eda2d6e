"""`make demo`'s program: everything up, the URL printed, everything gone on SIGTERM."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import redis

from devtools.redis_server import free_port
from devtools.stack import ROOT
from gpulse.keys import Keys
from tests.processes import assert_gone, still_running


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
    env.update(PORT=str(port), GPULSE_SIM_NODES="2", GPULSE_SIM_GPUS="4", GPULSE_ADMIN_PASSWORD="demo-pw-1234",
               GPULSE_RETENTION_INTERVAL="1")
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
                     "dashboard.control_worker beat",
                     "node.sim-01", "node.sim-02", "collectors"):
            assert part in names, f"{part} is not running"
        health = wait_for_health(f"http://127.0.0.1:{port}/", lambda health: health["ok"], 30)
        assert health["ok"], health
        assert "2 nodes" in health["checks"]["ingest"]["detail"]

        # sim-01 runs the production way: a collector and a node worker of its own, logged in as its own
        # users with URLs from files only this user can read; no password on any command line.
        state = ROOT / ".demo" / str(port)
        for user in ("node-sim-01", "nodeworker-sim-01"):
            credential = state / "credentials" / f"{user}-redis-url"
            assert credential.stat().st_mode & 0o777 == 0o600, credential
            assert credential.read_text().startswith(f"redis://{user}:")
        assert (state / "credentials").stat().st_mode & 0o777 == 0o700
        commands = [" ".join(c.cmdline()) for c in children]
        assert any("--only-node sim-01" in command for command in commands)
        assert any("--except-node sim-01" in command for command in commands)
        assert any("-Q node.sim-01 " in command for command in commands)  # its own worker
        assert not any(re.search(r"rediss?://[^ ]*:[^ @]+@", command) for command in commands), commands
        # redis-server shows its address as its title ("redis-server 127.0.0.1:PORT"); the stack's own
        # user, on loopback.
        port_of_redis = next(re.search(r"redis-server 127\.0\.0\.1:(\d+)", command) for command in commands
                             if "redis-server" in command).group(1)
        admin = redis.Redis(port=int(port_of_redis))
        users = {"node-sim-01", "nodeworker-sim-01", "simulator", "simulated-nodeworker"}
        deadline = time.monotonic() + 60  # the workers log in once Celery has started
        while not users <= (clients := {client["user"] for client in admin.client_list()}):
            assert time.monotonic() < deadline, clients
            time.sleep(0.5)
        assert admin.xlen(Keys().telemetry_stream("sim-01")) > 0
        # The stack's one beat, logged in as the control user, sends the retention pass; the control worker runs it.
        while b"retention: hourly rows written" not in (state / "control-worker.log").read_bytes():
            assert time.monotonic() < deadline, (state / "beat.log").read_text()[-2000:]
            time.sleep(0.5)
        # Its schedule file (an extension is the dbm's) in the state folder, none in the working tree.
        assert any(state.glob("celerybeat-schedule*")) and not any(ROOT.glob("celerybeat-schedule*"))

        demo.send_signal(signal.SIGTERM)
        assert demo.wait(30) == 0
        assert_gone(children)
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
        # One benchmark worker serves every simulated node but the first, which has its own as a real
        # node does (a worker each took ~270 MB).
        workers = [name for name, _ in stack.processes if name.startswith("node-worker")]
        assert workers == ["node-worker-sim-001", "node-worker"]
        rss = sum(psutil.Process(process.pid).memory_info().rss for _, process in stack.processes)
        rss += psutil.Process(stack.redis.process.pid).memory_info().rss
        assert rss < 4 * 2**30, f"{rss / 2**20:.0f} MiB"
    finally:
        stack.stop()


def start_demo(port: int, **popen) -> tuple[subprocess.Popen, list]:
    """`make demo`'s program on ``port`` with two nodes; return it once it prints its URL, and its children."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(PORT=str(port), GPULSE_SIM_NODES="2", GPULSE_SIM_GPUS="4", GPULSE_ADMIN_PASSWORD="demo-pw-1234",
               GPULSE_RETENTION_INTERVAL="1")
    demo = subprocess.Popen([sys.executable, "-m", "devtools.demo"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while not any("is running at" in line for line in lines):
        assert time.monotonic() < deadline and demo.poll() is None, "".join(lines)
        lines.append(demo.stdout.readline())
    wait_for_health(f"http://127.0.0.1:{port}/", lambda health: health["ok"], 30)
    return demo, psutil.Process(demo.pid).children(recursive=True)


def test_a_ctrl_c_stops_redis_last_so_ingest_makes_its_final_write():
    """A Ctrl-C goes to the terminal's whole process group: Redis, in it, died at once, and ingest's last
    rollup write failed ("Connection reset by peer") on a big demo. Redis must outlive every process."""
    port = free_port()
    demo, children = start_demo(port, start_new_session=True)  # a group of its own, as a terminal's job
    try:
        [redis_server] = [p for p in children if "redis-server" in " ".join(p.cmdline())]
        writers = ("manage.py ingest", "uvicorn", "celery", "collectors")
        others = [p for p in children if any(word in " ".join(p.cmdline()) for word in writers)]
        assert len(others) >= 7  # web, ingest, 2 control-side workers, 2 node workers, 2 collectors
        os.killpg(demo.pid, signal.SIGINT)
        while demo.poll() is None:
            # Whenever Redis is gone, every process that writes to it is gone already.
            if not still_running([redis_server]):
                assert not still_running(others), [" ".join(p.cmdline()) for p in still_running(others)]
            time.sleep(0.02)
        assert demo.returncode == 0
        ingest_log = (ROOT / ".demo" / str(port) / "ingest.log").read_text()
        assert "final write or acknowledgement failed" not in ingest_log, ingest_log[-2000:]
        assert_gone(children)
    finally:
        if demo.poll() is None:
            demo.kill()
        shutil.rmtree(ROOT / ".demo" / str(port), ignore_errors=True)


def test_a_demo_killed_with_sigkill_leaves_no_process_behind():
    """A hard kill runs no cleanup: each child ends with its parent (PR_SET_PDEATHSIG), or the web server,
    workers and Redis went on serving the port."""
    port = free_port()
    demo, children = start_demo(port)
    try:
        demo.kill()
        demo.wait(10)
        assert_gone(children)
    finally:
        for child in still_running(children):
            child.kill()
        shutil.rmtree(ROOT / ".demo" / str(port), ignore_errors=True)


STUBBORN_PARENT = """
import os, sys, time
from devtools.stack import Stack
stack = Stack(port=0, state_dir=sys.argv[1])
# A child that goes on after a SIGTERM, as Celery's solo pool does until its task ends (celery#7339).
stack.spawn("stubborn", "web", sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(600)", env=dict(os.environ))
print(stack.processes[0][1].pid, flush=True)
time.sleep(600)
"""


def test_a_child_that_finishes_its_work_on_sigterm_still_ends_with_a_killed_stack(tmp_path):
    """Once the stack's process is gone nobody waits for a graceful stop: its children are killed, not asked.
    A demo killed hard left a Celery worker behind for over a minute (a whole-suite run)."""
    parent = subprocess.Popen([sys.executable, "-c", STUBBORN_PARENT, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 30
        while "ready" not in (tmp_path / "stubborn.log").read_text():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        parent.kill()
        parent.wait(10)
        assert_gone([child], timeout=20)
    finally:
        parent.kill()
        for process in still_running([child]):
            process.kill()
