"""Bandwidth probes as ingest sees them: each node's latest busbw against its own median."""

import logging
import statistics
from collections import deque

import redis

from gpulse import schema
from gpulse.keys import Keys
from gpulse.ratelog import RateLimitedLog

log = logging.getLogger("gpulse.ingest")

# Probes a node's median is taken over, and the fewest that make a median worth trusting.
HISTORY = 50
MIN_HISTORY = 3


class ProbeTracker:
    """Follow the probes stream and judge each node's newest probe.

    A node is flagged ``low`` when its newest busbw fell below its own median
    of earlier probes by more than ``low_fraction`` (0.2: 20 % below), or when
    its newest probe failed outright.
    """

    def __init__(self, client: redis.Redis, keys: Keys, low_fraction: float):
        self.redis = client
        self.keys = keys
        self.low_fraction = low_fraction
        self.last_id: bytes | str | None = None
        self.history: dict[str, deque] = {}
        self.latest: dict[str, dict] = {}
        # Probe results come from the nodes: one that is not valid is logged (at a bounded rate) and skipped.
        self.rejections = RateLimitedLog(log)

    def seed(self, nodes: list[str]) -> None:
        """Load each node's recent probes, so a restarted ingest flags at once."""
        pipe = self.redis.pipeline(transaction=False)
        for node in nodes:
            pipe.lrange(self.keys.probe_history(node), 0, HISTORY - 1)
        for raw in pipe.execute():
            for record in reversed(raw):  # the list is newest first
                try:
                    self.record(schema.read_probe(record))
                except schema.MalformedSample as exc:
                    self.rejections.warning("skipped a probe result: %s", exc)

    def poll(self) -> set[str]:
        """Read new probe results; return the nodes whose verdict changed."""
        if self.last_id is None:
            newest = self.redis.xrevrange(self.keys.probes, count=1)
            self.last_id = newest[0][0] if newest else "0-0"
        reply = self.redis.xread({self.keys.probes: self.last_id}, count=1000)
        changed = set()
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self.last_id = entry_id
                try:
                    record = schema.read_probe(fields.get(b"p", b""))
                except schema.MalformedSample as exc:
                    self.rejections.warning("skipped probe entry %s: %s", entry_id, exc)
                    continue
                changed.add(record["node"])
                self.record(record)
        return changed

    def record(self, record: dict) -> None:
        node = record["node"]
        history = self.history.setdefault(node, deque(maxlen=HISTORY))
        # One rank crosses no link: its busbw is 0 by nccl-tests' formula, not a bandwidth to alert on.
        measured = record.get("status") == "succeeded" and record.get("world_size") != 1
        busbw = record.get("busbw") if measured else None
        earlier = [value for value in history if value is not None]
        median = statistics.median(earlier) if len(earlier) >= MIN_HISTORY else None
        failed = record.get("status") != "succeeded"
        low = failed or (median is not None and busbw is not None and busbw < (1 - self.low_fraction) * median)
        self.latest[node] = {"busbw": busbw, "median": median, "low": low, "status": record.get("status"),
                             "ts": record.get("ts")}
        history.append(busbw)

    def busbw(self) -> dict[str, float]:
        """Return each node's newest successful probe busbw (GB/s), for alert rules."""
        return {node: p["busbw"] for node, p in self.latest.items() if p["busbw"] is not None}
