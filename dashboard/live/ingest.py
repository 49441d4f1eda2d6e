"""Ingest's core: telemetry streams -> cluster state -> one frame per tick; stages for the rest.

It reads every node's telemetry stream as one consumer of a Redis consumer
group (dashboard/live/streams.py), keeps the newest sample per node in memory,
and once per tick sends browsers one coalesced delta frame (never one message
per sample) and rewrites the snapshot frame new browsers start from.
Everything else that rides on it (minute rollups and usage, node health,
probes, idle allocations, alert evaluation, incidents, the overview's counters)
is a stage, named in settings.GPULSE_INGEST_STAGES (dashboard/live/stages.py
says when each hook runs).

Entries are acknowledged once every stage says what they feed is durable
(Stage.durable; the rollups' stage documents how nothing is lost or counted
twice), and a database error never stops ingest (dashboard/live/outage.py).
"""

import gc
import logging
import socket
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import django.db
import orjson
import redis

from dashboard.live.frames import FrameBuilder
from dashboard.live.identity import DUPLICATE, NEW, RESTART, TAKEOVER, TWIN, CollectorIdentity
from dashboard.live.outage import DatabaseOutage
from dashboard.live.recent import RecentWrites
from dashboard.live.stages import Stage, load_stages, overriding
from dashboard.live.state import ClusterState, NodeState
from dashboard.live.streams import DISCOVER_EVERY, StreamReader, arrival_time
from gpulse import schema
from gpulse.keys import Keys
from gpulse.ratelog import RateLimitedLog
from gpulse.status import DEFAULT_MAX_CLOCK_SKEW, DOWN, UP, place
from gpulse.usage import BUSY_SM_ACTIVITY, BUSY_UTIL

log = logging.getLogger("gpulse.ingest")


def is_due(node: NodeState, now: float) -> bool:
    """Whether the node's next sample is due: up, its newest sample an interval old, held back or not
    (samples held over from the last tick must not pass for this tick's burst)."""
    return node.status == UP and node.ts + node.interval <= now


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
RECLAIM_EVERY = 15.0
# Each tick parses about 50,000 containers (a 1,000-node burst of samples) that
# live one tick. At Python's default threshold (700) that meant ~70 collections
# a tick and a full one over the whole heap every few ticks: a quarter of
# ingest's CPU at 1,000 nodes. Nothing in the loop builds reference cycles, so
# collect rarely.
GC_THRESHOLDS = (50_000, 20, 100)
# Nodes and consumers unseen for their configured time are forgotten, checked this often (at most).
PRUNE_EVERY = 60.0
DEFAULT_FORGET_NODES_AFTER = 7 * 86400.0
DEFAULT_FORGET_CONSUMERS_AFTER = 3600.0


class Ingest(StreamReader):
    def __init__(
        self,
        client: redis.Redis,
        publish: Callable[[bytes], bool],
        keys: Keys | None = None,
        tick: float = 1.0,
        clock: Callable[[], float] = time.time,
        stages: Iterable[str | Callable[["Ingest"], Stage]] | None = None,
        consumer: str | None = None,
        max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW,
        forget_nodes_after: float = DEFAULT_FORGET_NODES_AFTER,
        forget_consumers_after: float = DEFAULT_FORGET_CONSUMERS_AFTER,
        max_unacked: int = 200_000,
        busy_util: float = BUSY_UTIL,
        busy_sm_activity: float = BUSY_SM_ACTIVITY,
        discover_every: float = DISCOVER_EVERY,
    ):
        """``stages``: dotted paths of Stage classes, or callables that make one from this ingest
        (default: settings.GPULSE_INGEST_STAGES)."""
        super().__init__(client, keys or Keys(), consumer or socket.gethostname(), max_unacked, discover_every)
        self.publish = publish
        self.tick = tick
        self.clock = clock
        self.state = ClusterState(max_skew=max_clock_skew)
        self.forget_nodes_after = forget_nodes_after
        self.forget_consumers_after = forget_consumers_after
        self.frames = FrameBuilder(busy_util, busy_sm_activity)
        self.database = DatabaseOutage()
        self.sampled: set[str] = set()
        self.recent = RecentWrites(self.keys)
        self.burst_started = 0.0  # when the first sample since the last frame with samples arrived
        self.last_frame = 0.0
        self.last_data_frame = 0.0
        self.last_reclaim = 0.0
        self.last_prune = 0.0
        # Checked often enough that a node is forgotten at most a quarter of its time late.
        self.prune_every = min(PRUNE_EVERY, forget_nodes_after / 4)
        self.processed = 0
        self.duplicates = 0  # samples sent twice (same boot and seq), dropped
        self.collector_restarts = 0
        self.stage_failures = 0  # a stage's database work that raised
        self.stage_errors = RateLimitedLog(log, limit=1)
        self.lags: list[float] = []
        # What a stage offers the stages after it, by name (dashboard/live/stages.py lists the names).
        self.board: dict[str, Any] = {}
        self.stages = load_stages(self, stages)
        self.entry_stages = overriding(self.stages, "entry")
        self.sample_stages = overriding(self.stages, "sample")
        self.field_stages = overriding(self.stages, "node_fields")

    def found(self, names: list[str]) -> None:
        for stage in self.stages:
            stage.follow(names)

    def holding(self) -> float:
        return max((stage.holding() for stage in self.stages), default=0.0)

    # -- reading -------------------------------------------------------------

    def load_known_nodes(self) -> None:
        """Start from what Redis remembers, so a restarted ingest still knows down nodes; then each stage
        resumes what it keeps there."""
        known = self.redis.hgetall(self.keys.known_nodes)
        # Names an older ingest let in that the contract now refuses are left out.
        names = [name for name in (raw.decode(errors="replace") for raw in known) if schema.valid_node_name(name)]
        self.state.resume(names, known, self.redis.mget([self.keys.node(name) for name in names]))
        now = self.clock()
        self.state.refresh_statuses(now)
        for stage in self.stages:
            stage.restore()

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
        if self.entry_stages:
            # Usage and energy count the time the stream saw pass, never more than the sample's interval
            # (dashboard.live.identity.CountedTime); the live view keeps the interval the node sent.
            counted = identity.counted.seconds(min(placed, arrived - held), arrived, sample["interval"])
            # A node whose clock is off has its minutes by when its samples were taken, not by its clock.
            taken = ({**sample, "interval": counted} if skew is None
                     else {**sample, "ts": placed, "interval": counted})
            for stage in self.entry_stages:
                stage.entry(taken, entry_id)
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
        rows = self.frames.update(node)
        for stage in self.sample_stages:
            stage.sample(node, rows)
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
        self.recent.forget(name)
        self.sampled.discard(name)
        self.frames.forget(name)
        # Its stream goes too: what it still holds was read long ago or is a week old.
        self.streams.pop(name, None)
        stream = self.keys.telemetry_stream(name)
        self.unacked = [entry for entry in self.unacked if entry[0] != stream]
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.keys.known_nodes, name)
        pipe.delete(self.keys.recent(name), stream)
        for stage in self.stages:
            stage.forget(name, pipe)
        pipe.execute()

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
        if now - self.last_prune >= self.prune_every:
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
        for stage in self.stages:
            changed += stage.tick(now, changed)
        flags: dict[str, dict[int, int]] = {}
        summary: dict = {}
        for stage in self.stages:
            for name, bits in stage.gpu_flags().items():
                mine = flags.setdefault(name, {})
                for gpu, bit in bits.items():
                    mine[gpu] = mine.get(gpu, 0) | bit
            summary.update(stage.summary())
        delta, snapshot = self.frames.frames(self.state, self.sampled, changed, flags, self.node_fields, summary)
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
        flooded, self.flooded = self.flooded, set()
        self.recent.queue(pipe, self.sampled, nodes, self.streams, flooded, self.frames.rows_of)
        for stage in self.stages:
            stage.write_redis(pipe)
        pipe.set(self.keys.ingest_heartbeat, orjson.dumps(self.heartbeat(sent)), ex=60)
        pipe.execute()
        for stage in self.stages:
            stage.after_frame()
        if self.database.ready(now):
            self.use_database(now)
        if self.sampled:
            self.last_data_frame = now
        self.sampled.clear()
        self.last_frame = now

    def node_fields(self, name: str) -> dict:
        """The keys the stages add to the node's frame entry."""
        fields: dict = {}
        for stage in self.field_stages:
            fields.update(stage.node_fields(name))
        return fields

    def use_database(self, now: float) -> None:
        """Each stage's database work, in order; then the entries read so far are acknowledged if every
        stage holds them durable.

        The database work must not stop the frames: a database error is an
        outage (retried with backoff, rows kept in memory); any other failure is
        logged, counted and retried next tick, and the next stage runs.
        """
        try:
            for stage in self.stages:
                try:
                    stage.write_database(now)
                except django.db.Error:
                    raise
                except Exception:
                    self.stage_failed(stage)
        except django.db.Error as exc:
            self.database.failed(exc, now)
        else:
            self.database.recovered(now)
            self.ack_durable()

    def stage_failed(self, stage: object) -> None:
        self.stage_failures += 1
        self.stage_errors.log(logging.ERROR, "%s's database work failed; retrying next tick", type(stage).__name__,
                              exc_info=True)

    # -- acknowledgement ------------------------------------------------------

    def ack_durable(self) -> None:
        """Acknowledge every entry read so far, once no stage holds one of them unwritten."""
        if self.unacked and all(stage.durable() for stage in self.stages):
            ids, self.unacked = self.unacked, []
            # Should this XACK not reach Redis, the entries stay pending: re-read after
            # the reconnection, they are skipped by the checkpoints.
            self.ack(ids)

    def flush(self) -> None:
        """Have every stage write all it holds now, then acknowledge what was read."""
        for stage in self.stages:
            stage.flush()
        self.ack_durable()

    def finish(self) -> None:
        """Write and acknowledge what was read, before exit (SIGTERM, Ctrl-C)."""
        try:
            self.flush()
        except (django.db.Error, redis.ConnectionError, redis.TimeoutError) as exc:
            # Nothing is lost: what was not acknowledged stays pending for the next ingest.
            log.error("final write or acknowledgement failed (%s)", exc)

    def heartbeat(self, now: float) -> dict:
        down = sum(1 for node in self.state.nodes.values() if node.status == DOWN)
        beat = {
            "ts": now,
            "lag_p50": statistics.median(self.lags) if self.lags else None,
            "lag_max": max(self.lags) if self.lags else None,
            "processed": self.processed,
            "rejected": self.rejected,
            "forged": self.forged,
            "nulled": self.nulled,
            "duplicates": self.duplicates,
            "collector_restarts": self.collector_restarts,
            # Samples of a second collector writing as a node, dropped (of the nodes ingest knows now).
            "twin_dropped": sum(node.identity.twin_dropped for node in self.state.nodes.values()),
            "nodes_twin": sum(1 for node in self.state.nodes.values() if node.identity.twin_since is not None),
            "catching_up": self.state.catching_up,
            "stage_failures": self.stage_failures,
            "nodes": len(self.state.nodes),
            "nodes_down": down,
            "nodes_clock_skew": sum(1 for node in self.state.nodes.values() if node.skew is not None),
            "database": self.database.describe(),
            # Entries read and not yet acknowledged (the rollups' stage adds what it holds).
            "rollups": {"unacked": len(self.unacked), "exposed_entries": self.exposed},
        }
        for stage in self.stages:
            stage.heartbeat(beat)
        return beat

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
