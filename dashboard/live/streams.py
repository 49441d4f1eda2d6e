"""Reading the node streams through ingest's consumer group, and acknowledging what was read.

A stream is written only by its node's collector (its ACL user), so a sample
read from ``telemetry:<name>`` is node <name>'s, and one naming another node is
refused: who a sample is from comes from the credential that wrote it. New
nodes' streams are found by SCAN (every DISCOVER_EVERY seconds). Entries are
acknowledged only once what they feed is durable (Ingest.ack_durable, when every
stage says so): until then they are held here, bounded by ``max_unacked``.
"""

import logging
import time
from collections.abc import Callable

import redis

from dashboard.live.state import ClusterState
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from gpulse.ratelog import RateLimitedLog

log = logging.getLogger("gpulse.ingest")

# Entries read from one node's stream per XREADGROUP (a node's 100 s at 1 Hz).
READ_BATCH = 100
# Entries read from all the streams per XREADGROUP, at most, but never under one a stream (past 10,000
# streams a read takes one entry of each): the reply is held whole in memory, and a backlog on every
# stream at READ_BATCH each (ingest restarted, or held up) is 100,000 entries at 1,000 nodes, 0.9 GB of
# 9 KB samples before parsing (a soak with such a backlog left ingest at 3.8 GB, 0.25 GB without).
# 10,000 entries: some 90 MB a read.
READ_BUDGET = 10_000
# A new node's stream is found by SCAN this often (seconds).
DISCOVER_EVERY = 1.0
# Keys SCAN looks at per call.
SCAN_COUNT = 10_000
# Entries another consumer read but never acknowledged for this long (and as long as
# this ingest holds its own: StreamReader.holding) are taken over.
RECLAIM_IDLE_MS = 30_000
# XACK at most this many ids per command.
ACK_BATCH = 10_000


def arrival_time(entry_id: bytes) -> float:
    """When the entry reached the stream, in unix seconds on Redis' clock: its id's millisecond part."""
    return int(entry_id.split(b"-", 1)[0]) / 1000


class StreamReader:
    """One consumer of the group on every node's telemetry stream; Ingest takes in what it reads (apply())."""

    # Ingest's: the nodes it knows, its clock, how long an idle consumer of the group is kept.
    state: ClusterState
    clock: Callable[[], float]
    forget_consumers_after: float

    def __init__(self, client: redis.Redis, keys: Keys, consumer: str, max_unacked: int, discover_every: float):
        self.redis = client
        self.keys = keys
        # Stable across restarts, so what a killed ingest left pending is its own to re-read.
        self.consumer = consumer
        # node -> its telemetry stream, for every stream the group is made on
        self.streams: dict[str, str] = {}
        self.discover_every = discover_every
        self.last_discovery = -float("inf")  # time.monotonic() of the last SCAN
        # (stream, entry id) read and not yet durable (a stage, the rollups, holds what they feed)
        self.unacked: list[tuple[str, bytes]] = []
        self.max_unacked = max_unacked
        self.exposed = 0  # entries acknowledged before what they feed was written (bound reached)
        self.flooded: set[str] = set()  # nodes whose stream gave more than one entry in a read since the frame
        self.group_ready = False
        self.connected_before = False  # a later ensure_group() means Redis was away or restarted
        self.rejected = 0  # entries refused by the sample contract, or that failed to apply
        self.forged = 0  # of those, samples naming another node than the stream's
        self.nulled = 0  # readings out of their range, set to null
        self.rejections = RateLimitedLog(log)

    def apply(self, sample: dict, entry_id: bytes, held: float = 0.0) -> None:
        raise NotImplementedError

    def found(self, names: list[str]) -> None:
        """The streams of these nodes were found for the first time."""

    def holding(self) -> float:
        """Seconds this ingest may hold an entry unacknowledged, the database being up."""
        return 0.0

    def ensure_group(self) -> None:
        """(Re)connect: the group on every node's stream, then what was left pending."""
        if self.connected_before:
            self.state.hold(self.clock())
        self.streams = {}
        self.connected_before = self.group_ready = True
        self.discover()

    def discover(self) -> list[str]:
        """Find the node streams that have no group of ours yet, make it, take what they hold pending;
        return the new nodes.

        A stream exists once its collector wrote to it; a key whose name is not a node's is left alone.
        """
        self.last_discovery = time.monotonic()
        found = []
        for key in self.redis.scan_iter(match=self.keys.telemetry_streams, count=SCAN_COUNT, _type="stream"):
            name = self.keys.telemetry_node(key)
            if name is not None and name not in self.streams and schema.valid_node_name(name):
                found.append(name)
        if not found:
            return found
        pipe = self.redis.pipeline(transaction=False)
        for name in found:
            pipe.xgroup_create(self.keys.telemetry_stream(name), INGEST_GROUP, id="0")
        for name, outcome in zip(found, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(outcome, redis.ResponseError) and "BUSYGROUP" not in str(outcome):
                raise outcome
            self.streams[name] = self.keys.telemetry_stream(name)
        self.found(found)
        # Before anything new: every entry left pending (by a killed ingest, or by this one
        # before Redis went away), in id order, so the rollups' checkpoint stays exact.
        self.reclaim(min_idle_ms=0, nodes=found)
        return found

    def read(self, block_ms: int | None, nodes: list[str] | None = None) -> int:
        """Read what is new on the streams (one batch each; block_ms None: do not wait), or on ``nodes``'
        streams only; return how many entries came."""
        if not self.group_ready:
            self.ensure_group()
        elif time.monotonic() - self.last_discovery >= self.discover_every:
            self.discover()
        streams = self.streams if nodes is None else {name: self.streams[name] for name in nodes
                                                      if name in self.streams}
        if not streams:
            if block_ms:
                time.sleep(block_ms / 1000)
            self.state.catching_up = False
            return 0
        # A tick brings each stream one entry: only a backlog meets the budget's share.
        count = max(1, min(READ_BATCH, READ_BUDGET // len(streams)))
        try:
            reply = self.redis.xreadgroup(
                INGEST_GROUP, self.consumer, dict.fromkeys(streams.values(), ">"), count=count, block=block_ms,
            )
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):  # Redis restarted empty: the streams and groups are gone
                self.group_ready = False
                return 0
            raise
        got, full = 0, False
        for stream, entries in reply or ():
            self.handle(stream.decode() if isinstance(stream, bytes) else stream, entries)
            got += len(entries)
            full = full or len(entries) == count
        if not full:
            self.state.catching_up = False
        return got

    def reclaim(self, min_idle_ms: int | None = None, nodes: list[str] | None = None) -> int:
        """Take over entries a dead consumer read but never acknowledged (on ``nodes``' streams, else all)."""
        if min_idle_ms is None:
            # This ingest holds what it read until its usage is written: idle that long is not dead.
            min_idle_ms = RECLAIM_IDLE_MS + int(self.holding() * 1000)
        # Entries this ingest holds longer (while the database is away) are claimed too, as
        # idle ones: they are not taken in a second time.
        held = set(self.unacked)
        claimed = 0
        # stream -> where its next XAUTOCLAIM starts; one pipeline a round over every stream
        starts: dict[str, bytes | str] = dict.fromkeys(
            self.streams.values() if nodes is None else [self.streams[name] for name in nodes], "0-0")
        while starts:
            pipe = self.redis.pipeline(transaction=False)
            for stream, start in starts.items():
                pipe.xautoclaim(stream, INGEST_GROUP, self.consumer, min_idle_ms, start_id=start, count=READ_BATCH)
            for stream, reply in zip(list(starts), pipe.execute(), strict=True):
                # Redis 7 adds a third element (deleted ids); 6.2 answers two.
                start, entries = reply[:2]
                entries = [entry for entry in entries if (stream, entry[0]) not in held]
                if entries:
                    self.handle(stream, entries)
                    claimed += len(entries)
                if start in (b"0-0", "0-0"):
                    del starts[stream]
                else:
                    starts[stream] = start
        return claimed

    def handle(self, stream: str, entries: list) -> None:
        """Apply each entry of one node's stream on its own; a rejected one is logged (rate-limited), counted
        and skipped. A sample naming another node than the stream's is refused: only the node's own
        credential writes there.

        Every entry is acknowledged with the next rollup write, whatever happened
        to the others: an entry left pending would be reclaimed and fail again, forever.
        """
        node = self.keys.telemetry_node(stream)
        if len(entries) > 1 and node is not None:
            self.flooded.add(node)  # or a backlog after an outage: trimmed this tick either way
        try:
            for entry_id, fields in entries:
                if fields is None:  # trimmed away by MAXLEN before we got to it
                    continue
                try:
                    sample, nulled = schema.read(fields.get(b"s", b""))
                    held = schema.held_seconds(fields.get(b"held"))
                except schema.MalformedSample as exc:
                    self.reject(entry_id, exc)
                    continue
                if sample["node"] != node:
                    self.forged += 1
                    self.reject(entry_id, f"names node {sample['node']!r}, written to node {node!r}'s stream")
                    continue
                self.nulled += nulled
                try:
                    self.apply(sample, entry_id, held)
                except Exception as exc:  # a valid sample ingest cannot take is a bug: log it, keep going
                    self.reject(entry_id, exc, exc_info=True)
        finally:
            self.hold_acks([(stream, entry_id) for entry_id, _ in entries])

    def reject(self, entry_id: bytes, reason: Exception | str, exc_info: bool = False) -> None:
        self.rejected += 1
        self.rejections.warning("rejected telemetry entry %s: %s", entry_id.decode(), reason, exc_info=exc_info)

    def forget_idle_consumers(self) -> None:
        """Delete the group's consumers (dead ingests) idle that long with nothing pending: they own nothing."""
        idle_ms = self.forget_consumers_after * 1000
        streams = list(self.streams.values())
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_consumers(stream, INGEST_GROUP)
        for stream, consumers in zip(streams, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(consumers, Exception):  # the stream went away since (forgotten, Redis restarted)
                continue
            for consumer in consumers:
                name = consumer["name"]
                name = name.decode(errors="replace") if isinstance(name, bytes) else name
                if name != self.consumer and consumer["pending"] == 0 and consumer["idle"] > idle_ms:
                    # DELCONSUMER answers how many entries it dropped: 0 unless one was read since.
                    dropped = self.redis.xgroup_delconsumer(stream, INGEST_GROUP, name)
                    log.info("removed idle ingest consumer %s of %s (%d pending entries dropped)", name, stream,
                             dropped)

    def hold_acks(self, ids: list[tuple[str, bytes]]) -> None:
        """Keep entry ids until what they feed is written (Ingest.ack_durable acknowledges them)."""
        self.unacked += ids
        excess = len(self.unacked) - self.max_unacked
        if excess > 0:
            # Bounded memory and a bounded pending list in Redis during a long database
            # outage: the oldest are acknowledged now, their rollups only in memory. A
            # crash before the next write would lose them; counted as exposed.
            self.exposed += excess
            self.ack(self.unacked[:excess])
            del self.unacked[:excess]

    def ack(self, entries: list[tuple[str, bytes]]) -> None:
        by_stream: dict[str, list[bytes]] = {}
        for stream, entry_id in entries:
            by_stream.setdefault(stream, []).append(entry_id)
        pipe = self.redis.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            for start in range(0, len(ids), ACK_BATCH):
                pipe.xack(stream, INGEST_GROUP, *ids[start:start + ACK_BATCH])
        pipe.execute()
