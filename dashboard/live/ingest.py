"""Ingest: telemetry streams -> cluster state -> one frame per tick, alerts, rollups.

One consumer of a Redis consumer group on every node's telemetry stream. A
stream is written only by its node's collector (its ACL user), so a sample read
from ``telemetry:<name>`` is node <name>'s, and one naming another node is
refused: who a sample is from comes from the credential that wrote it. It
finds new nodes' streams by SCAN (every DISCOVER_EVERY seconds), reads in
batches, keeps the newest sample per node in memory, and once per tick sends
browsers one coalesced delta frame (never one message per sample), rewrites
the snapshot frame new browsers start from, evaluates alert rules and merges
minute rollups into the database every few seconds. Each node's health
(dashboard/live/node_health.py) is judged once per tick: what changed goes to
the Redis hash Keys().health, the frames, and the database (verdict changes).

Entries are acknowledged only once the rollups they feed are durable, and a
database error never stops ingest: dashboard/live/rollups.py documents how.
"""

import gc
import logging
import socket
import statistics
import time
from collections.abc import Callable

import django.db
import orjson
import redis

from dashboard.live.frames import FrameBuilder
from dashboard.live.health_changes import HealthChangeQueue
from dashboard.live.identity import DUPLICATE, NEW, RESTART, TAKEOVER, TWIN, CollectorIdentity
from dashboard.live.idle import IdleAllocations
from dashboard.live.node_health import NodeHealthBook, read_record
from dashboard.live.outage import DatabaseOutage
from dashboard.live.probes import ProbeTracker
from dashboard.live.rollups import RollupAccumulator
from dashboard.live.state import ClusterState, NodeState, remembered
from gpulse import schema
from gpulse.keys import INGEST_GROUP, RECENT_POINTS, TELEMETRY_MAXLEN, Keys
from gpulse.ratelog import RateLimitedLog
from gpulse.status import DEFAULT_MAX_CLOCK_SKEW, DOWN, UP, place
from gpulse.usage import BUSY_UTIL

log = logging.getLogger("gpulse.ingest")


def is_due(node: NodeState, now: float) -> bool:
    """Whether the node's next sample is due: up, its newest sample an interval old, held back or not
    (samples held over from the last tick must not pass for this tick's burst)."""
    return node.status == UP and node.ts + node.interval <= now

# Entries read from one node's stream per XREADGROUP (a node's 100 s at 1 Hz).
READ_BATCH = 100
# A new node's stream is found by SCAN this often (seconds).
DISCOVER_EVERY = 1.0
# Keys SCAN looks at per call.
SCAN_COUNT = 10_000
# Wait this long for more entries before calling a burst of samples finished.
# A sleep here, not XREADGROUP's BLOCK: Redis before 7 times a BLOCK out on its
# 100 ms clock (hz 10), which made every burst gap 100 ms on the way to browsers.
BURST_GAP = 0.02
# Between bursts, block this long for the next one; it wakes the read at once.
IDLE_BLOCK_MS = 100
# Collectors sample on the wall clock's grid, so each tick's samples come as one
# burst. A burst is over once no node that is up is still due (when one is, reads
# go on, BURST_GAP apart), or at the latest this fraction of a tick after it
# began: a few collector processes finishing apart must not split it in two.
BURST_WAIT_MAX = 0.4
# Entries another consumer read but never acknowledged for this long (and as long as
# this ingest holds its own: Ingest.reclaim) are taken over.
RECLAIM_IDLE_MS = 30_000
RECLAIM_EVERY = 15.0
# Each tick parses about 50,000 containers (a 1,000-node burst of samples) that
# live one tick. At Python's default threshold (700) that meant ~70 collections
# a tick and a full one over the whole heap every few ticks: a quarter of
# ingest's CPU at 1,000 nodes. Nothing in the loop builds reference cycles, so
# collect rarely.
GC_THRESHOLDS = (50_000, 20, 100)
# A node's recent-point list is trimmed on every this-many pushes, to
# RECENT_POINTS minus as many, so it never holds more than RECENT_POINTS: at
# 1,000 nodes an LTRIM per push was nearly half of each tick's Redis commands.
RECENT_TRIM_EVERY = 10
# A node's stream likewise, to TELEMETRY_MAXLEN, on every this-many of its samples, and
# at once when a read took more than one entry of it (a node flooding its stream, or a
# backlog): an XTRIM per sample was 1,000 commands a tick.
STREAM_TRIM_EVERY = 10
# Nodes and consumers unseen for their configured time are forgotten, checked this often.
PRUNE_EVERY = 60.0
DEFAULT_FORGET_NODES_AFTER = 7 * 86400.0
DEFAULT_FORGET_CONSUMERS_AFTER = 3600.0
# XACK at most this many ids per command.
ACK_BATCH = 10_000


def arrival_time(entry_id: bytes) -> float:
    """When the entry reached the stream, in unix seconds on Redis' clock: its id's millisecond part."""
    return int(entry_id.split(b"-", 1)[0]) / 1000


class Ingest:
    def __init__(
        self,
        client: redis.Redis,
        publish: Callable[[bytes], bool],
        keys: Keys | None = None,
        tick: float = 1.0,
        clock: Callable[[], float] = time.time,
        evaluator=None,
        summary: Callable[[dict[str, int] | None], dict] | None = None,
        consumer: str | None = None,
        probe_low_fraction: float = 0.2,
        max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW,
        forget_nodes_after: float = DEFAULT_FORGET_NODES_AFTER,
        forget_consumers_after: float = DEFAULT_FORGET_CONSUMERS_AFTER,
        flush_interval: float = 5.0,
        usage_flush_interval: float = 60.0,
        max_rollup_rows: int = 500_000,
        max_unacked: int = 200_000,
        busy_util: float = BUSY_UTIL,
        usage_accounting: bool = True,
        discover_every: float = DISCOVER_EVERY,
    ):
        self.redis = client
        self.publish = publish
        self.keys = keys or Keys()
        self.tick = tick
        self.clock = clock
        self.evaluator = evaluator
        # Called each tick with the count of allocated-but-idle GPUs per model (their cost is its to price),
        # None while usage accounting is off.
        self.summary = summary or (lambda idle_by_model: {})
        # Stable across restarts, so what a killed ingest left pending is its own to re-read.
        self.consumer = consumer or socket.gethostname()
        self.state = ClusterState(max_skew=max_clock_skew)
        self.forget_nodes_after = forget_nodes_after
        self.forget_consumers_after = forget_consumers_after
        self.frames = FrameBuilder(busy_util)
        self.rollups = RollupAccumulator(self.keys.telemetry_stream, INGEST_GROUP, max_rows=max_rollup_rows,
                                         busy_util=busy_util, accounting=usage_accounting)
        # Off, the list stays empty: its first write clears what an earlier ingest left.
        self.usage_accounting = usage_accounting
        self.idle = IdleAllocations()
        self.flush_interval = flush_interval
        self.next_flush = 0.0
        self.usage_flush_interval = usage_flush_interval
        self.next_usage_flush = 0.0
        self.database = DatabaseOutage()
        # node -> its telemetry stream, for every stream the group is made on
        self.streams: dict[str, str] = {}
        self.discover_every = discover_every
        self.last_discovery = -float("inf")  # time.monotonic() of the last SCAN
        # (stream, entry id) read whose rollups or usage are not written yet
        self.unacked: list[tuple[str, bytes]] = []
        self.max_unacked = max_unacked
        self.exposed = 0  # entries acknowledged before their rollups and usage were written (bound reached)
        self.probes = ProbeTracker(client, self.keys, probe_low_fraction)
        self.health = NodeHealthBook()
        self.health_changes = HealthChangeQueue()
        self.sampled: set[str] = set()
        self.pushes: dict[str, int] = {}  # node -> recent points pushed, to trim every RECENT_TRIM_EVERY
        self.flooded: set[str] = set()  # nodes whose stream gave more than one entry in a read since the frame
        self.burst_started = 0.0  # when the first sample since the last frame with samples arrived
        self.last_frame = 0.0
        self.last_data_frame = 0.0
        self.last_reclaim = 0.0
        self.last_prune = 0.0
        self.group_ready = False
        self.connected_before = False  # a later ensure_group() means Redis was away or restarted
        self.processed = 0
        self.rejected = 0  # entries refused by the sample contract, or that failed to apply
        self.forged = 0  # of those, samples naming another node than the stream's
        self.nulled = 0  # readings out of their range, set to null
        self.duplicates = 0  # samples sent twice (same boot and seq), dropped
        self.collector_restarts = 0
        self.stage_failures = 0  # per-tick database stages (summary, rollups) that raised
        self.rejections = RateLimitedLog(log)
        self.stage_errors = RateLimitedLog(log, limit=1)
        self.lags: list[float] = []
        self.latest_summary: dict = {}

    # -- reading -------------------------------------------------------------

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
        self.probes.follow(found)
        # Before anything new: every entry left pending (by a killed ingest, or by this one
        # before Redis went away), in id order, so the rollups' checkpoint stays exact.
        self.reclaim(min_idle_ms=0, nodes=found)
        return found

    def load_known_nodes(self) -> None:
        """Start from what Redis remembers, so a restarted ingest still knows down nodes
        (and how long the idle GPUs have been idle)."""
        if self.usage_accounting:
            self.idle.resume(self.redis.get(self.keys.idle_allocations))
        known = self.redis.hgetall(self.keys.known_nodes)
        if not known:
            return
        # Names an older ingest let in that the contract now refuses are left out.
        names = [name for name in (raw.decode(errors="replace") for raw in known) if schema.valid_node_name(name)]
        self.probes.seed(names)
        latest = self.redis.mget([self.keys.node(name) for name in names])
        now = self.clock()
        for name, raw in zip(names, latest, strict=True):
            try:
                seen = remembered(known[name.encode()])
            except schema.MalformedSample as exc:
                log.warning("forgetting node %s: what Redis remembers of it is not valid: %s", name, exc)
                continue
            try:
                sample = schema.parse(raw) if raw else None
            except schema.MalformedSample:
                sample = None
            if sample is None:
                sample = {"v": 1, "node": name, "ts": seen["ts"], "interval": seen["interval"], "gpus": []}
                try:
                    schema.validate(sample)
                except schema.MalformedSample as exc:
                    log.warning("forgetting node %s: what Redis remembers of it is not valid: %s", name, exc)
                    continue
            arrived = seen["arrived"]
            placed, skew = place(sample["ts"], arrived, self.state.max_skew)
            identity = CollectorIdentity(seen.get("boot"), seen.get("restarts", 0))
            self.state.nodes[name] = NodeState(name, sample, arrived, placed, skew, identity=identity)
        self.state.refresh_statuses(now)
        self.load_health()

    def load_health(self) -> None:
        """Start each known node's health from the hash, so the since-times survive a restart;
        a node without a valid entry there is judged afresh."""
        records = self.redis.hgetall(self.keys.health)
        for name, node in self.state.nodes.items():
            raw = records.get(name.encode())
            try:
                record = None if raw is None else read_record(raw)
            except schema.MalformedSample as exc:
                log.warning("node %s: its health in Redis is not valid, judging it afresh: %s", name, exc)
                record = None
            if record is None:
                self.health.track(name)
            else:
                self.health.restore(name, record, node.status == DOWN)

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
        try:
            reply = self.redis.xreadgroup(
                INGEST_GROUP, self.consumer, dict.fromkeys(streams.values(), ">"), count=READ_BATCH, block=block_ms,
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
            full = full or len(entries) == READ_BATCH
        if not full:
            self.state.catching_up = False
        return got

    def reclaim(self, min_idle_ms: int | None = None, nodes: list[str] | None = None) -> int:
        """Take over entries a dead consumer read but never acknowledged (on ``nodes``' streams, else all)."""
        if min_idle_ms is None:
            # This ingest holds what it read until its usage is written: idle that long is not dead.
            holding = self.flush_interval + (self.usage_flush_interval if self.usage_accounting else 0.0)
            min_idle_ms = RECLAIM_IDLE_MS + int(holding * 1000)
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

    def apply(self, sample: dict, entry_id: bytes, held: float = 0.0) -> None:
        """Take in one valid sample from stream entry ``entry_id``.

        ``held``: seconds its collector held it (Redis was away): it was taken
        that much before it arrived.
        """
        arrived = arrival_time(entry_id)
        name, seq = sample["node"], sample.get("seq")
        node = self.state.nodes.get(name)
        identity = node.identity if node is not None else CollectorIdentity()
        verdict = identity.check(sample["boot"], seq, arrived, sample["interval"]) if seq is not None else None
        if verdict == DUPLICATE:
            self.duplicates += 1
            return
        if verdict in (TWIN, TAKEOVER) and identity.twin_since == arrived:
            log.warning("node %s: two collectors report as this node (runs %s and %s); only one's samples count",
                        name, identity.earlier[-1] if verdict == TAKEOVER else identity.boot, sample["boot"])
        if verdict == TWIN:  # a second collector writing as this node: flagged (identity), its samples not summed
            return
        if verdict == RESTART:
            self.collector_restarts += 1
            log.info("node %s: its collector restarted (run %s, %d restarts seen)", name, sample["boot"],
                     identity.restarts)
        self.processed += 1
        placed, skew = place(sample["ts"], arrived - held, self.state.max_skew)
        # Usage and energy count the time the stream saw pass, never more than the sample's interval
        # (dashboard.live.identity.CountedTime); the live view keeps the interval the node sent.
        counted = identity.counted.seconds(min(placed, arrived - held), arrived, sample["interval"])
        # A node whose clock is off has its minutes by when its samples were taken, not by its clock.
        self.rollups.add({**sample, "interval": counted} if skew is None
                         else {**sample, "ts": placed, "interval": counted}, entry_id)
        if node is None:
            node = self.state.nodes[name] = NodeState(name, sample, arrived, placed, skew, identity=identity)
        else:
            node.arrived = max(node.arrived, arrived)
            # A late entry (a backlog, one reclaimed from a dead consumer) must not replace a newer one.
            if seq is None:  # no verdict: the sample carries no identity
                newer = placed >= node.placed
            else:
                newer = verdict in (RESTART, TAKEOVER) or verdict == NEW and identity.is_newest(seq)
            if not newer:
                return
            node.sample, node.placed, node.skew = sample, placed, skew
        self.health.update(name, sample)
        rows = self.frames.update(node)
        if self.usage_accounting:
            self.idle.update(name, sample, placed, rows)
        if not self.sampled:
            self.burst_started = self.clock()
        self.sampled.add(name)

    # -- pruning ----------------------------------------------------------------

    def prune(self, now: float) -> None:
        """Forget nodes down for longer than forget_nodes_after, and consumers idle past forget_consumers_after."""
        for name in [name for name, node in self.state.nodes.items()
                     if node.status == DOWN and now - node.arrived > self.forget_nodes_after]:
            self.forget_node(name)
        self.forget_idle_consumers()

    def forget_node(self, name: str) -> None:
        log.info("forgetting node %s: nothing from it for %.0f s", name, self.forget_nodes_after)
        del self.state.nodes[name]
        self.pushes.pop(name, None)
        self.sampled.discard(name)
        self.frames.forget(name)
        self.health.forget(name)
        self.idle.forget(name)
        self.rollups.forget(name)
        self.probes.forget(name)
        # Its streams go too: what they still hold was read long ago or is a week old.
        self.streams.pop(name, None)
        stream = self.keys.telemetry_stream(name)
        self.unacked = [entry for entry in self.unacked if entry[0] != stream]
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.keys.known_nodes, name)
        pipe.hdel(self.keys.health, name)
        pipe.delete(self.keys.recent(name), self.keys.probe_history(name), stream, self.keys.probe_stream(name))
        pipe.execute()

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

    # -- one tick ---------------------------------------------------------------

    def step(self) -> None:
        """Read one batch; send a frame when a burst of samples is over or a tick has passed."""
        if self.sampled:
            # Within a burst, only the streams of the nodes still due: an XREADGROUP costs for every
            # stream it names (~4 ms at 1,000), and a burst takes a few. The read between bursts names
            # them all, so what another node sent waits at most for the end of this burst.
            got = self.read(None, self._due(self.clock()))
            if not got and self._burst_open(self.clock(), got):  # nodes still due: give them a moment
                time.sleep(BURST_GAP)
                got = self.read(None, self._due(self.clock()))
        else:
            got = self.read(IDLE_BLOCK_MS)
        now = self.clock()
        burst_open = self.sampled and self._burst_open(now, got)
        if self.sampled and not burst_open and self._tick_of(now) != self._tick_of(self.last_data_frame):
            self.emit(now)  # the first frame of this tick that carries samples
        elif now - self.last_frame >= self.tick and not burst_open:
            self.emit(now)  # statuses age, and samples held back go out, even when no burst comes
        if now - self.last_reclaim >= RECLAIM_EVERY:
            self.last_reclaim = now
            self.reclaim()
        if now - self.last_prune >= PRUNE_EVERY:
            self.last_prune = now
            self.prune(now)

    def _tick_of(self, t: float) -> int:
        """Index of the tick on the wall clock's grid: at most one frame with samples per tick.

        On the grid, not counted from the last frame: one late frame must not
        hold every later one back to its phase.
        """
        return int(t // self.tick)

    def _burst_open(self, now: float, got: int) -> bool:
        # Samples held over from an earlier tick do not start this tick's burst.
        started = max(self.burst_started, self._tick_of(now) * self.tick)
        if now - started >= BURST_WAIT_MAX * self.tick:
            return False
        if got:
            return True
        return any(is_due(node, now) for node in self.state.nodes.values())

    def _due(self, now: float) -> list[str]:
        """The nodes whose next sample is due (is_due)."""
        return [name for name, node in self.state.nodes.items() if is_due(node, now)]

    def emit(self, now: float) -> None:
        changed = self.state.refresh_statuses(now)
        nodes = self.state.nodes
        for name in changed:
            if nodes[name].status == DOWN:
                self.idle.forget(name)
        health_changed = self.health.tick(now, nodes, changed)
        self.health_changes.add(self.health.take_changes())
        changed += health_changed
        changed += [node for node in self.probes.poll() if node in nodes]
        # Alert flags and the summary come from the previous tick's evaluation and
        # queries, which run after the frame is out: at 8,000 GPUs they cost tens
        # of ms that would delay every frame, and one tick late is still on time.
        firing = self.evaluator.firing_targets() if self.evaluator is not None else set()
        delta, snapshot = self.frames.frames(
            self.state, self.sampled, changed, firing, self.probes.latest, self.latest_summary, self.health.nodes
        )
        sent = time.time()
        if self.sampled:
            # From arrival, not the node's ts: lag is ingest's own delay, whatever a node's clock says.
            self.lags = [sent - nodes[name].arrived for name in self.sampled]

        # The snapshot is written before the delta goes out: a browser that joins
        # in between then reads a snapshot as new as that delta, never older.
        self.redis.set(self.keys.snapshot, snapshot)
        if delta is not None:
            self.publish(delta)
        # What pages read later (recent points, known nodes, the heartbeat) waits until after.
        pipe = self.redis.pipeline(transaction=False)
        if self.sampled:
            pipe.hset(
                self.keys.known_nodes,
                mapping={name: orjson.dumps(nodes[name].known()) for name in self.sampled},
            )
        if health_changed:
            health = self.health.nodes
            pipe.hset(self.keys.health, mapping={name: orjson.dumps(health[name].record()) for name in health_changed})
        pushes = self.pushes
        streams = self.streams
        flooded, self.flooded = self.flooded, set()
        for name in self.sampled:
            # The first push trims too: a restarted ingest may find a longer list, or stream.
            count = pushes[name] = pushes.get(name, -1) + 1
            if name in streams and (count % STREAM_TRIM_EVERY == 0 or name in flooded):
                # The node's collector asks for this cap; one that leaves it out and writes more than
                # a sample a read floods only its own stream, and only until here.
                pipe.xtrim(streams[name], maxlen=TELEMETRY_MAXLEN, approximate=True)
            key = self.keys.recent(name)
            pipe.lpush(key, orjson.dumps([nodes[name].ts, self.frames.rows_of(name)]))
            if count % RECENT_TRIM_EVERY == 0:
                pipe.ltrim(key, 0, RECENT_POINTS - RECENT_TRIM_EVERY - 1)
        if self.idle.changed:
            pipe.set(self.keys.idle_allocations, self.idle.record())
        pipe.set(self.keys.ingest_heartbeat, orjson.dumps(self.heartbeat(sent)), ex=60)
        pipe.execute()
        self.rollups.fold_queued()
        if self.database.ready(now):
            self.use_database(now)
        if self.sampled:
            self.last_data_frame = now
        self.sampled.clear()
        self.last_frame = now

    def use_database(self, now: float) -> None:
        """Write verdict changes, evaluate alerts, query the summary and, every flush_interval, write rollups.

        The database stages must not stop the frames: a database error is an
        outage (retried with backoff, rows kept in memory); any other failure is
        logged, counted and retried next tick.
        """
        try:
            self.health_changes.write()
            if self.evaluator is not None:
                self.evaluator.evaluate(self.state, now, probes=self.probes.busbw(), health=self.health.nodes)
            self.latest_summary = self.summary(self.idle.by_model(now) if self.usage_accounting else None)
            if now >= self.next_flush:
                usage = now >= self.next_usage_flush
                self.flush_rollups(usage=usage)
                self.next_flush = now + self.flush_interval
                if usage:
                    self.next_usage_flush = now + self.usage_flush_interval
        except django.db.Error as exc:
            self.database.failed(exc, now)
        except Exception:
            self.stage_failures += 1
            self.stage_errors.log(logging.ERROR, "tick's database work failed; retrying next tick", exc_info=True)
        else:
            self.database.recovered(now)

    # -- acknowledgement ------------------------------------------------------

    def hold_acks(self, ids: list[tuple[str, bytes]]) -> None:
        """Keep entry ids until the rollups and usage they feed are written (flush_rollups acknowledges them)."""
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

    def flush_rollups(self, usage: bool = True) -> int:
        """Write the rollups of every entry read so far and, with ``usage``, their usage, then acknowledge
        those entries once both are written; return rollup rows."""
        written = self.rollups.write(usage=usage)
        if usage or not self.usage_accounting:
            ids, self.unacked = self.unacked, []
            # Should this XACK not reach Redis, the entries stay pending: re-read after
            # the reconnection, they are skipped by the checkpoints.
            self.ack(ids)
        return written

    def finish(self) -> None:
        """Write and acknowledge what was read, before exit (SIGTERM, Ctrl-C)."""
        try:
            self.flush_rollups()
        except (django.db.Error, redis.ConnectionError, redis.TimeoutError) as exc:
            # Nothing is lost: what was not acknowledged stays pending for the next ingest.
            log.error("final rollup write or acknowledgement failed (%s)", exc)

    def heartbeat(self, now: float) -> dict:
        down = sum(1 for node in self.state.nodes.values() if node.status == DOWN)
        return {
            "ts": now,
            "lag_p50": statistics.median(self.lags) if self.lags else None,
            "lag_max": max(self.lags) if self.lags else None,
            "processed": self.processed,
            "rejected": self.rejected,
            "forged": self.forged + self.probes.forged,
            "nulled": self.nulled,
            "duplicates": self.duplicates,
            "collector_restarts": self.collector_restarts,
            # Samples of a second collector writing as a node, dropped (of the nodes ingest knows now).
            "twin_dropped": sum(node.identity.twin_dropped for node in self.state.nodes.values()),
            "nodes_twin": sum(1 for node in self.state.nodes.values() if node.identity.twin_since is not None),
            "catching_up": self.state.catching_up,
            "stage_failures": self.stage_failures,
            "alerts": self.evaluator.status() if self.evaluator is not None else None,
            "nodes": len(self.state.nodes),
            "nodes_down": down,
            "nodes_clock_skew": sum(1 for node in self.state.nodes.values() if node.skew is not None),
            "database": self.database.describe(),
            "rollups": {
                "unacked": len(self.unacked),
                "pending_rows": self.rollups.pending_rows(),
                "lost_samples": self.rollups.lost_samples,
                "lost_usage_samples": self.rollups.lost_usage_samples,
                "exposed_entries": self.exposed,
            },
            "health": {"pending_changes": len(self.health_changes.pending), "lost_changes": self.health_changes.lost},
        }

    # -- the loop ---------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Run until ``should_stop()``; ride out Redis outages instead of exiting."""
        # What exists now (Django, settings, the app registry) lives for the
        # whole process: frozen, collections stop scanning it.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
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
            except django.db.Error as exc:  # use_database() catches its own; anything else, the same way
                self.database.failed(exc, time.time())
                time.sleep(self.database.backoff)
