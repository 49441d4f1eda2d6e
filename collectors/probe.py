"""The periodic bandwidth probe: a small all-reduce among a node's GPUs.

Every ``interval`` seconds a background thread runs the benchmark engine
(workers.launcher) on each node this collector covers — NCCL across the GPUs
where CUDA is available, gloo on the CPU elsewhere — and writes one result per
node to its probe stream (field ``p``) and to its probe history list:

    {"v": 1, "node": "gpu-01", "ts": 1764000000.0, "backend": "nccl",
     "world_size": 8, "max_bytes": 16777216, "busbw": 182.4, "avg_busbw": 97.1,
     "wrong": 0, "status": "succeeded", "reason": null, "duration_s": 4.2}

``busbw`` is the bus bandwidth at the largest message size (GB/s), the figure
that compares with the hardware's link speed.
"""

import json
import logging
import threading
import time
from collections.abc import Callable

import redis

from gpulse.keys import PROBE_HISTORY, PROBES_MAXLEN, Keys

log = logging.getLogger(__name__)


def probe_once(node: str, max_bytes: int, ranks: int | None, timeout: float,
               cancel: Callable[[], bool] | None = None) -> dict:
    """Run one probe on this machine and return its result record."""
    # Imported here: torch loads only in processes that probe.
    from workers.launcher import run_node
    from workers.sweep_spec import SweepSpec

    spec = SweepSpec(backend="auto", min_bytes=max(1024, max_bytes // 16), max_bytes=max_bytes,
                     warmup=2, iters=5, ranks_per_node=ranks, timeout=timeout)
    result = run_node(spec, cancel=cancel)
    largest = [row for row in result.rows if row.size == max((r.size for r in result.rows), default=None)]
    return {
        "v": 1,
        "node": node,
        "ts": time.time(),
        "backend": result.spec.backend,
        "world_size": result.spec.world_size if result.spec.ranks_per_node else None,
        "max_bytes": max_bytes,
        "busbw": max((row.busbw for row in largest), default=None),
        "avg_busbw": sum(row.busbw for row in result.rows) / len(result.rows) if result.rows else None,
        "wrong": sum(row.wrong or 0 for row in result.rows),
        "status": result.status,
        "reason": result.reason,
        "duration_s": round(result.duration_s, 2),
    }


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
        self.client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
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
