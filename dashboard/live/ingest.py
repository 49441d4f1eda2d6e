"""Ingest: telemetry stream -> cluster state -> one frame per tick, alerts, rollups.

One consumer of a Redis consumer group on the telemetry stream. It reads in
batches, keeps the newest sample per node in memory, and once per tick sends
browsers one coalesced delta frame (never one message per sample), rewrites
the snapshot frame new browsers start from, evaluates alert rules and writes
minute rollups in bulk.
"""

import logging
import os
import socket
import statistics
import time
from collections.abc import Callable

import orjson
import redis

from dashboard.live.frames import FrameBuilder, gpu_row
from dashboard.live.probes import ProbeTracker
from dashboard.live.rollups import RollupAccumulator
from dashboard.live.state import DOWN, ClusterState, NodeState
from gpulse import schema
from gpulse.keys import INGEST_GROUP, RECENT_POINTS, Keys

log = logging.getLogger("gpulse.ingest")

READ_BATCH = 5000
# Wait this long for more entries before calling a burst of samples finished.
BURST_GAP_MS = 20
# Entries another consumer read but never acknowledged for this long are taken over.
RECLAIM_IDLE_MS = 30_000
RECLAIM_EVERY = 15.0


class Ingest:
    def __init__(
        self,
        client: redis.Redis,
        publish: Callable[[bytes], bool],
        keys: Keys | None = None,
        tick: float = 1.0,
        clock: Callable[[], float] = time.time,
        evaluator=None,
        summary: Callable[[], dict] | None = None,
        consumer: str | None = None,
        probe_low_fraction: float = 0.2,
    ):
        self.redis = client
        self.publish = publish
        self.keys = keys or Keys()
        self.tick = tick
        self.clock = clock
        self.evaluator = evaluator
        self.summary = summary or dict
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.state = ClusterState()
        self.frames = FrameBuilder()
        self.rollups = RollupAccumulator()
        self.probes = ProbeTracker(client, self.keys, probe_low_fraction)
        self.sampled: set[str] = set()
        self.last_frame = 0.0
        self.last_reclaim = 0.0
        self.group_ready = False
        self.processed = 0
        self.malformed = 0
        self.lags: list[float] = []

    # -- reading -------------------------------------------------------------

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.keys.telemetry, INGEST_GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self.group_ready = True

    def load_known_nodes(self) -> None:
        """Start from what Redis remembers, so a restarted ingest still knows down nodes."""
        known = self.redis.hgetall(self.keys.known_nodes)
        if not known:
            return
        names = [name.decode() for name in known]
        self.probes.seed(names)
        latest = self.redis.mget([self.keys.node(name) for name in names])
        now = self.clock()
        for name, raw in zip(names, latest):
            try:
                sample = schema.parse(raw) if raw else None
            except schema.MalformedSample:
                sample = None
            if sample is None:
                seen = orjson.loads(known[name.encode()])
                sample = {"v": 1, "node": name, "ts": seen["ts"], "interval": seen["interval"], "gpus": []}
            self.state.nodes[name] = NodeState(name, sample)
        self.state.refresh_statuses(now)

    def read(self, block_ms: int) -> int:
        """Read what is new on the stream (one batch); return how many entries came."""
        if not self.group_ready:
            self.ensure_group()
        try:
            reply = self.redis.xreadgroup(
                INGEST_GROUP, self.consumer, {self.keys.telemetry: ">"}, count=READ_BATCH, block=block_ms
            )
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):  # Redis restarted empty: the stream and group are gone
                self.group_ready = False
                return 0
            raise
        if not reply:
            return 0
        entries = reply[0][1]
        self.handle(entries)
        return len(entries)

    def reclaim(self) -> int:
        """Take over entries a dead consumer read but never acknowledged."""
        claimed = 0
        start = "0-0"
        while True:
            # Redis 7 adds a third element (deleted ids); 6.2 answers two.
            start, entries = self.redis.xautoclaim(
                self.keys.telemetry, INGEST_GROUP, self.consumer, RECLAIM_IDLE_MS, start_id=start, count=READ_BATCH
            )[:2]
            if entries:
                self.handle(entries)
                claimed += len(entries)
            if start in (b"0-0", "0-0"):
                return claimed

    def handle(self, entries: list) -> None:
        """Apply each entry on its own: a malformed one is logged, counted and skipped."""
        ids = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            if fields is None:  # trimmed away by MAXLEN before we got to it
                continue
            try:
                sample = schema.parse(fields.get(b"s", b""))
            except schema.MalformedSample as exc:
                self.malformed += 1
                log.warning("skipped malformed telemetry entry %s: %s", entry_id.decode(), exc)
                continue
            self.apply(sample)
        self.redis.xack(self.keys.telemetry, INGEST_GROUP, *ids)

    def apply(self, sample: dict) -> None:
        self.processed += 1
        self.rollups.add(sample)
        name = sample["node"]
        node = self.state.nodes.get(name)
        if node is None:
            self.state.nodes[name] = NodeState(name, sample)
        elif sample["ts"] >= node.ts:  # a late, buffered sample must not replace a newer one
            node.sample = sample
        else:
            return
        self.sampled.add(name)

    # -- one tick ---------------------------------------------------------------

    def step(self) -> None:
        """Read one batch; send a frame when a burst ended or a tick has passed."""
        got = self.read(BURST_GAP_MS)
        now = self.clock()
        since = now - self.last_frame
        burst_over = got == 0 and self.sampled and since >= 0.8 * self.tick
        if burst_over or since >= self.tick:
            self.emit(now)
        if now - self.last_reclaim >= RECLAIM_EVERY:
            self.last_reclaim = now
            self.reclaim()

    def emit(self, now: float) -> None:
        changed = self.state.refresh_statuses(now)
        changed += [node for node in self.probes.poll() if node in self.state.nodes]
        if self.evaluator is not None:
            self.evaluator.evaluate(self.state, now, probes=self.probes.busbw())
        firing = self.evaluator.firing_targets() if self.evaluator is not None else set()
        summary = self.summary()
        probes = self.probes.latest
        delta = self.frames.delta(self.state, self.sampled, changed, firing, probes, summary)
        snapshot = self.frames.snapshot(self.state, firing, probes, summary)

        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.snapshot, snapshot)
        if self.sampled:
            pipe.hset(
                self.keys.known_nodes,
                mapping={
                    name: orjson.dumps({"ts": self.state.nodes[name].ts, "interval": self.state.nodes[name].interval})
                    for name in self.sampled
                },
            )
        for name in self.sampled:
            node = self.state.nodes[name]
            point = orjson.dumps([node.ts, [gpu_row(g, False) for g in node.sample["gpus"]]])
            pipe.lpush(self.keys.recent(name), point)
            pipe.ltrim(self.keys.recent(name), 0, RECENT_POINTS - 1)
        sent = time.time()
        self.lags = [sent - self.state.nodes[name].ts for name in self.sampled] or self.lags
        pipe.set(self.keys.ingest_heartbeat, orjson.dumps(self.heartbeat(sent)), ex=60)
        pipe.execute()
        if self.sampled or changed:
            self.publish(delta)
        self.rollups.flush(now)
        self.sampled.clear()
        self.last_frame = now

    def heartbeat(self, now: float) -> dict:
        down = sum(1 for node in self.state.nodes.values() if node.status == DOWN)
        return {
            "ts": now,
            "lag_p50": statistics.median(self.lags) if self.lags else None,
            "lag_max": max(self.lags) if self.lags else None,
            "processed": self.processed,
            "malformed": self.malformed,
            "nodes": len(self.state.nodes),
            "nodes_down": down,
        }

    # -- the loop ---------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Run until ``should_stop()``; ride out Redis outages instead of exiting."""
        backoff = 0.5
        outage_since = None
        while not should_stop():
            try:
                if not self.state.nodes:
                    self.load_known_nodes()
                self.step()
                if outage_since is not None:
                    log.info("Redis is back after %.0f s; ingest resumed", time.time() - outage_since)
                    outage_since = None
                    backoff = 0.5
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if outage_since is None:
                    outage_since = time.time()
                    log.error("Redis unreachable (%s); retrying until it is back", exc)
                self.group_ready = False
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
