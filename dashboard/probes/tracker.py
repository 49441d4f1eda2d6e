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
    """Follow each node's probe stream and judge its newest probe.

    A node is flagged ``low`` when its newest busbw fell below its own median
    of earlier probes by more than ``low_fraction`` (0.2: 20 % below), or when
    its newest probe failed outright. A result counts for the node whose stream
    it came in (only that node's collector may write there); one naming another
    node is refused and counted in ``forged``.
    """

    def __init__(self, client: redis.Redis, keys: Keys, low_fraction: float):
        self.redis = client
        self.keys = keys
        self.low_fraction = low_fraction
        self.last_ids: dict[str, bytes | str] = {}  # node -> the newest entry read from its stream
        self.history: dict[str, deque] = {}
        self.latest: dict[str, dict] = {}
        self.forged = 0
        # Probe results come from the nodes: one that is not valid is logged (at a bounded rate) and skipped.
        self.rejections = RateLimitedLog(log)

    def seed(self, nodes: list[str]) -> None:
        """Load each node's recent probes, so a restarted ingest flags at once; read its stream from its newest."""
        pipe = self.redis.pipeline(transaction=False)
        for node in nodes:
            pipe.lrange(self.keys.probe_history(node), 0, HISTORY - 1)
            pipe.xrevrange(self.keys.probe_stream(node), count=1)
        replies = pipe.execute()
        for node, raw, newest in zip(nodes, replies[::2], replies[1::2], strict=True):
            for record in reversed(raw):  # the list is newest first
                try:
                    record = schema.read_probe(record)
                except schema.MalformedSample as exc:
                    self.rejections.warning("skipped a probe result: %s", exc)
                    continue
                if self._from(node, record):
                    self.record(record)
            self.last_ids[node] = newest[0][0] if newest else "0-0"

    def follow(self, nodes) -> None:
        """Read these nodes' probe streams too, from their first entry (nodes new since the seed)."""
        for node in nodes:
            self.last_ids.setdefault(node, "0-0")

    def forget(self, node: str) -> None:
        self.last_ids.pop(node, None)
        self.history.pop(node, None)
        self.latest.pop(node, None)

    def poll(self) -> set[str]:
        """Read new probe results; return the nodes whose verdict changed."""
        if not self.last_ids:
            return set()
        streams = {self.keys.probe_stream(node): node for node in self.last_ids}
        reply = self.redis.xread({stream: self.last_ids[node] for stream, node in streams.items()}, count=100)
        changed = set()
        for stream, entries in reply or ():
            node = streams[stream.decode() if isinstance(stream, bytes) else stream]
            for entry_id, fields in entries:
                self.last_ids[node] = entry_id
                try:
                    record = schema.read_probe(fields.get(b"p", b""))
                except schema.MalformedSample as exc:
                    self.rejections.warning("skipped probe entry %s of node %s: %s", entry_id, node, exc)
                    continue
                if self._from(node, record):
                    changed.add(node)
                    self.record(record)
        return changed

    def _from(self, node: str, record: dict) -> bool:
        """Whether a result read from ``node``'s own key names that node."""
        if record["node"] == node:
            return True
        self.forged += 1
        self.rejections.warning("refused a probe result naming node %s from node %s's stream", record["node"], node)
        return False

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
