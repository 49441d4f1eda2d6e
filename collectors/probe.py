"""The periodic bandwidth probe: a small all-reduce among a node's GPUs.

Every ``interval`` seconds a background thread runs the benchmark engine
(`python -m workers.probe`, a process of its own) on each node this collector
covers — NCCL across the GPUs where CUDA is available, gloo on the CPU
elsewhere — and writes one result per node to its probe stream (field ``p``)
and to its probe history list:

    {"v": 1, "node": "gpu-01", "ts": 1764000000.0, "backend": "nccl",
     "world_size": 8, "max_bytes": 16777216, "busbw": 182.4, "avg_busbw": 97.1,
     "wrong": 0, "status": "succeeded", "reason": null, "duration_s": 4.2}

``busbw`` is the bus bandwidth at the largest message size (GB/s), the figure
that compares with the hardware's link speed.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import redis

from gpulse.keys import PROBE_HISTORY, PROBES_MAXLEN, Keys
from gpulse.node_redis import node_redis_client

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.5
# How long past its own timeout a probe may run before it counts as stuck and is killed.
KILL_AFTER_S = 30.0
PROBE_COMMAND = (sys.executable, "-m", "workers.probe")


class ProbeFailed(RuntimeError):
    """The probe process gave no record: the message says why."""

    def __init__(self, why: str):
        super().__init__(f"python -m workers.probe: {why}")


def probe_once(node: str, max_bytes: int, ranks: int | None, timeout: float,
               cancel: Callable[[], bool] | None = None) -> dict:
    """Run one probe on this machine (`python -m workers.probe`, a process of its own) and return its record.

    ``cancel`` is asked twice a second; once it says stop, the probe is sent SIGTERM and its
    cancelled record returned once its ranks are stopped. The probe ends itself at its own
    ``timeout``; one still running KILL_AFTER_S later is stuck (a hung CUDA or NCCL call) and is
    killed with its ranks. Raise ProbeFailed when it gave no record."""
    command = [*PROBE_COMMAND, "--node", node, "--max-bytes", str(max_bytes), "--timeout", str(timeout)]
    if ranks is not None:
        command += ["--ranks", str(ranks)]
    stopped = False
    deadline = time.monotonic() + timeout + KILL_AFTER_S
    # A session of its own: the probe and the ranks it starts are one process group to kill.
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                          start_new_session=True) as probe:
        while True:
            try:
                out, _ = probe.communicate(timeout=CANCEL_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    os.killpg(probe.pid, signal.SIGKILL)
                    probe.communicate()
                    raise ProbeFailed(f"still running {KILL_AFTER_S:g} s past its {timeout:g} s timeout: "
                                      "killed with its ranks") from None
                if not stopped and cancel is not None and cancel():
                    # Before the probe sets its handler this ends it at once, with no rank started.
                    probe.terminate()
                    stopped = True
    lines = out.strip().splitlines()
    if stopped and not lines:
        return {"node": node, "status": "cancelled"}
    if probe.returncode != 0 or not lines:
        raise ProbeFailed(f"ended with exit status {probe.returncode} and no record")
    return probe_record(node, lines[-1])


def probe_record(node: str, line: str) -> dict:
    """The probe's last line as its record; raise ProbeFailed naming what is wrong with it."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if type(record) is not dict or type(record.get("status")) is not str or record.get("node") != node:
        raise ProbeFailed(f"its last line is not a record of {node}'s probe: {line[:200]!r}")
    return record


def publish_probe(client: redis.Redis, keys: Keys, record: dict) -> None:
    body = json.dumps(record)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(keys.probe_stream(record["node"]), {"p": body}, maxlen=PROBES_MAXLEN, approximate=True)
    pipe.lpush(keys.probe_history(record["node"]), body)
    pipe.ltrim(keys.probe_history(record["node"]), 0, PROBE_HISTORY - 1)
    pipe.execute()


class ProbeRunner:
    """Probe each node in turn every ``interval`` seconds, off the sampling thread."""

    def __init__(self, nodes: list[str], interval: float, redis_url: str, max_bytes: int,
                 ranks: int | None, timeout: float = 120.0):
        self.nodes = nodes
        self.interval = interval
        self.client = node_redis_client(redis_url)
        self.keys = Keys()
        self.max_bytes = max_bytes
        self.ranks = ranks
        self.timeout = timeout
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="probe", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(self.timeout)

    def loop(self) -> None:
        # The first probe waits one interval: a collector that restarts often
        # must not keep the GPUs busy with probes.
        while not self.stopped.wait(self.interval):
            for node in self.nodes:
                if self.stopped.is_set():
                    return
                self.probe(node)

    def probe(self, node: str) -> None:
        try:
            record = probe_once(node, self.max_bytes, self.ranks, self.timeout, cancel=self.stopped.is_set)
        except Exception as exc:  # a probe must never take the collector down
            log.error("probe of %s could not run: %s", node, exc)
            return
        if record["status"] == "cancelled":  # the collector is stopping
            return
        if record["status"] != "succeeded":
            log.warning("probe of %s %s: %s", node, record["status"], record["reason"])
        try:
            publish_probe(self.client, self.keys, record)
        except redis.RedisError as exc:
            log.warning("probe result of %s not written, Redis unreachable: %s", node, exc)
