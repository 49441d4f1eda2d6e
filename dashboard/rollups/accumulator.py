"""Minute rollups of GPU readings: nothing lost, nothing counted twice, across crashes and outages.

How a sample reaches its row, and why a kill -9, a SIGTERM or a database
outage at any moment loses no minute and counts nothing twice:

1. Mergeable aggregates. Each (node, gpu, minute) row keeps samples and, per
   metric, min, max, sum and count (the mean is sum / count, kept in its own
   column for readers). Partial minutes therefore merge: ingest writes what it
   gathered every GPULSE_ROLLUP_FLUSH_INTERVAL seconds (rollup_store's upsert
   adds to the row), and a late sample, minutes after its minute ended, still
   lands in it. There is no grace period and no minute held back.
2. Acknowledge only what is durable. Ingest keeps the ids of the stream
   entries it read and XACKs them only after the write that folded them in
   committed (with usage accounting on, the write of their usage, every
   GPULSE_USAGE_FLUSH_INTERVAL seconds). Until then they stay pending in
   Redis; a restarted ingest claims every pending entry (its own and a dead
   consumer's) before reading new ones.
3. Exactly once across a crash between COMMIT and XACK. The same transaction
   as the upsert records a checkpoint: the newest entry id folded in, per
   node's stream and consumer group, for the rollups and for the usage. Each
   node's entries are folded in id order, and one at or below its node's
   high-water mark (the checkpoint, or the newest entry folded since) is
   skipped here; one between the usage's mark and the rollups' counts for its
   usage alone. Ingest still shows each live.
4. Database outages. A failed write changes nothing in memory: the aggregates
   stay (merging further samples) and are written by the next attempt. They
   are bounded at GPULSE_ROLLUP_MAX_ROWS (node, gpu, minute) cells; past it the
   oldest minute is dropped, logged and counted in ``lost_samples``. The usage,
   bounded the same way but written less often and a row per owner, drops
   minutes of its own: counted apart, in ``lost_usage_samples``.

Limits. The checkpoints are exact for one ingest consumer reading the streams
in order: run one ingest at a time (stop the old one before the new starts).
Sharding the nodes over several ingests needs each to own its nodes' streams.
"""

import datetime as dt
import logging
from collections.abc import Callable, Iterator

import numpy as np
from django.db import transaction

from dashboard.live.models import ROLLUP_METRICS
from dashboard.rollups import rollup_store, usage_store
from dashboard.rollups.usage import SAMPLES, EnergyCounters, MigReadings, MinuteUsage, Who
from gpulse.usage import BUSY_SM_ACTIVITY, BUSY_UTIL, owner

log = logging.getLogger("gpulse.ingest")


Key = tuple[int, int]
# Before any entry: every entry orders after it.
NO_ENTRY: Key = (0, 0)


def entry_key(entry_id: bytes | str) -> Key:
    """A stream entry id ("1700000000000-3") as a pair that orders like the stream."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


# What is read of each GPU reading, by one C-level map: the rollups' metrics, then the energy counter.
FIELDS = (*ROLLUP_METRICS, "energy")
UTIL, POWER, ENERGY, SM_ACTIVE = (FIELDS.index(name) for name in ("util", "power", "energy", "sm_active"))


class MinuteRollup:
    """One minute: (min, sum, max, count) per GPU and metric as numpy arrays indexed by GPU id
    (RollupAccumulator's)."""

    def __init__(self, minute: int):
        metrics = len(ROLLUP_METRICS)
        self.samples = np.zeros(0, dtype=np.int64)
        self.low = np.zeros((0, metrics))
        self.total = np.zeros((0, metrics))
        self.high = np.zeros((0, metrics))
        self.count = np.zeros((0, metrics), dtype=np.int64)
        self.cells = 0  # GPUs with a reading: the rows this minute writes
        self.start = dt.datetime.fromtimestamp(minute, dt.UTC)

    def fold(self, ids: np.ndarray, values: np.ndarray, gpus: int) -> None:
        """Merge readings (``values`` in ROLLUP_METRICS order, NaN for a null) of the GPUs ``ids``;
        ``gpus``: how many GPU ids there are."""
        grow = gpus - len(self.samples)
        if grow > 0:
            metrics = len(ROLLUP_METRICS)
            self.samples = np.concatenate([self.samples, np.zeros(grow, dtype=np.int64)])
            self.low = np.concatenate([self.low, np.full((grow, metrics), np.inf)])
            self.total = np.concatenate([self.total, np.zeros((grow, metrics))])
            self.high = np.concatenate([self.high, np.full((grow, metrics), -np.inf)])
            self.count = np.concatenate([self.count, np.zeros((grow, metrics), dtype=np.int64)])
        present = ~np.isnan(values)
        # ufunc.at, because one GPU may appear twice in a batch (a backlog flushed after an outage).
        np.add.at(self.samples, ids, 1)
        np.fmin.at(self.low, ids, values)  # fmin/fmax skip NaN
        np.fmax.at(self.high, ids, values)
        np.add.at(self.total, ids, np.where(present, values, 0.0))
        np.add.at(self.count, ids, present)
        self.cells = int(np.count_nonzero(self.samples))

    def rows(self, gpus: list[tuple[str, int]]) -> Iterator[tuple]:
        """Yield one row per GPU read in the minute, in rollup_store.COLUMNS order; ``gpus``:
        (node, GPU index) per GPU id."""
        start = self.start
        read = np.flatnonzero(self.samples)
        count = self.count[read]
        mean = np.divide(self.total[read], count, out=np.zeros(count.shape), where=count > 0)
        present = (count > 0).tolist()
        low, mean, high = self.low[read].tolist(), mean.tolist(), self.high[read].tolist()
        total, count, samples = self.total[read].tolist(), count.tolist(), self.samples[read].tolist()
        for i, gpu_id in enumerate(read.tolist()):
            values = [*gpus[gpu_id], start, samples[i]]
            for m in range(len(ROLLUP_METRICS)):
                seen = present[i][m]
                values += [low[i][m] if seen else None, mean[i][m] if seen else None,
                           high[i][m] if seen else None, total[i][m], count[i][m]]
            yield tuple(values)


class RollupAccumulator:
    """Gather samples into partial minutes; write() merges them into the database with the checkpoint.

    ``stream_of(node)`` and ``group`` name each node's checkpoint: its stream key and the consumer group. The
    usage accounting (dashboard/rollups/usage.py) rides along: same samples, same
    per-GPU pass, same transactions. Its rows are written less often than the
    rollups (write(usage=False) keeps them): a GPU's usage row is a dozen numbers
    a minute that 8,000 GPUs would otherwise rewrite at every rollup write, most
    of what accounting cost ingest. So it has a checkpoint of its own, at or
    behind the rollups': an entry between the two has its rollups written and
    its usage not, and is folded for its usage alone when read again.

    Each GPU (node, index) has an id, the row of every per-GPU array. A pruned
    node's ids are given to new GPUs once the minutes that may hold its
    readings are written, so the arrays stay the size of the cluster.
    """

    def __init__(self, stream_of: Callable[[str], str], group: str, max_rows: int = 500_000,
                 busy_util: float = BUSY_UTIL, accounting: bool = True, busy_sm_activity: float = BUSY_SM_ACTIVITY):
        self.stream_of = stream_of
        self.group = group
        self.max_rows = max_rows
        self.busy_util = busy_util
        self.busy_sm_activity = busy_sm_activity
        self.accounting = accounting  # off (settings.GPULSE_USAGE_ACCOUNTING): the rollups only
        self.minutes: dict[int, MinuteRollup] = {}
        self.usage: dict[int, MinuteUsage] = {}  # minute -> its unwritten usage
        self.ids: dict[tuple[str, int], int] = {}  # (node, GPU index) -> GPU id
        self.gpus: list[tuple[str, int]] = []  # GPU id -> (node, GPU index)
        self.free_ids: list[int] = []  # ids no pending minute refers to
        self.released_ids: list[int] = []  # ids of pruned nodes, free after the next write of both
        self.energy = EnergyCounters()
        self.queued: list[tuple[tuple[int, int] | None, dict]] = []
        # Until the checkpoint is read (resume()), entries wait in ``queued``.
        self.resumed = False
        # Per node, the newest entry folded into the rollups, and into the usage (checkpoint or since) ...
        self.high_water: dict[str, Key] = {}
        self.usage_high_water: dict[str, Key] = {}
        # ... and what the database's checkpoints say of each.
        self.written_mark: dict[str, Key] = {}
        self.usage_written_mark: dict[str, Key] = {}
        self.duplicates = 0  # entries skipped as already counted
        self.lost_samples = 0  # samples dropped for the bound during a database outage
        # Samples whose usage was dropped for the bound: the rollups' and the usage's minutes are bounded
        # apart, so either may lose samples the other still holds.
        self.lost_usage_samples = 0

    def resume(self, checkpoints: dict[str, tuple[Key, Key]]) -> None:
        """Start from the checkpoints: per node, the newest entries already in the rollups and in the usage."""
        self.high_water = {node: marks[0] for node, marks in checkpoints.items()}
        # Without accounting the usage is not kept: its mark follows the rollups'.
        self.usage_high_water = {node: marks[1 if self.accounting else 0] for node, marks in checkpoints.items()}
        self.written_mark = dict(self.high_water)
        self.usage_written_mark = dict(self.usage_high_water)
        self.resumed = True

    def add(self, sample: dict, entry_id: bytes | str | None = None) -> None:
        """Queue a sample (the per-GPU work waits for fold_queued(), after the tick's frame).

        ``entry_id``: the entry of its node's stream it came in; None for a sample from no stream,
        which is always counted.
        """
        self.queued.append((None if entry_id is None else entry_key(entry_id), sample))

    def fold_queued(self) -> None:
        """Fold queued samples into their minutes, in entry order, skipping what is already counted.

        The loop over GPUs runs for every GPU of the cluster every second: it only
        reads, and the arithmetic is numpy's, once per call. gpulse.usage's
        definitions are inlined in it (tests/test_usage_accounting.py holds the
        two in step).
        """
        if not self.resumed:
            self._bound_queue()
            return
        ids: list[int] = []
        values: list[tuple] = []
        slots: list[int] = []
        sizes: list[int] = []
        times: list[float] = []
        intervals: list[float] = []
        minutes: list[int] = []
        usage_only: list[int] = []  # samples (by position) read again whose rollups are written
        mig = MigReadings()
        known, accounting = self.ids, self.accounting
        high_water, usage_high_water = self.high_water, self.usage_high_water
        for key, sample in self.queued:
            node = sample["node"]
            if key is not None:
                if key <= usage_high_water.get(node, NO_ENTRY):
                    self.duplicates += 1
                    continue
                usage_high_water[node] = key
                if key <= high_water.get(node, NO_ENTRY):  # read again after a restart: its rollups are written
                    usage_only.append(len(sizes))
                else:
                    high_water[node] = key
            minute = int(sample["ts"] // 60) * 60
            read = len(ids)
            if accounting:
                if minute not in self.usage:
                    self.usage[minute] = MinuteUsage(dt.datetime.fromtimestamp(minute, dt.UTC))
                usage = self.usage[minute]
                current = usage.current
                if len(current) < len(self.gpus):
                    current += [None] * (len(self.gpus) - len(current))
            for gpu in sample["gpus"]:
                get = gpu.get
                if get("lost"):
                    continue
                index = gpu["index"]
                gpu_id = known.get((node, index))
                if gpu_id is None:
                    gpu_id = self._new_id(node, index)
                    if accounting and gpu_id == len(current):
                        current.append(None)
                ids.append(gpu_id)
                values.append(tuple(map(get, FIELDS)))
                if not accounting:
                    continue
                instances = get("mig")
                if instances is not None:  # MIG mode: its instances are the GPUs their owners hold
                    slots.append(mig.add(usage, len(ids) - 1, gpu_id, node, index, get("name") or "", instances))
                    continue
                newest = current[gpu_id]
                processes, k8s = get("processes"), get("k8s")
                if k8s is None and processes and len(processes) == 1:  # the common case, owner() without its calls
                    process = processes[0]
                    # The same process as in the GPU's newest reading: the same owner. (A pid reused by
                    # another owner within the minute would count as the first's until the minute ends.)
                    mark = process.get("pid")
                    if newest is not None and newest[0] == mark:
                        slots.append(newest[1])
                        continue
                    who: Who = (process.get("user") or "", process.get("job") or "", process.get("pod_uid") or "")
                elif processes or k8s and k8s.get("pod"):
                    who = mark = owner(gpu)
                else:
                    who = mark = None  # not allocated
                slots.append(newest[1] if newest is not None and newest[0] == mark
                             else usage.slot(gpu_id, mark, node, index, who, get("name") or ""))
            sizes.append(len(ids) - read)
            times.append(sample["ts"])
            intervals.append(sample["interval"])
            minutes.append(minute)
        self.queued = []
        if ids:
            self._fold(np.array(ids), np.array(values, dtype=float), np.array(slots), np.array(sizes),
                       times, intervals, minutes, usage_only, mig)
        self._bound()

    def _fold(self, ids: np.ndarray, values: np.ndarray, slots: np.ndarray, sizes: np.ndarray,
              times: list[float], intervals: list[float], minutes: list[int], usage_only: list[int],
              mig: MigReadings) -> None:
        """Fold the readings of the queued samples (a null reading is NaN in ``values``) into their minutes;
        ``usage_only``: the samples (by position) whose rollups are already written; ``mig``: the MIG GPUs'."""
        touched = set(minutes)
        minute_of = np.repeat(minutes, sizes) if len(touched) > 1 else None
        rollup = None
        if usage_only:
            counted = np.ones(len(sizes), dtype=bool)
            counted[usage_only] = False
            rollup = np.repeat(counted, sizes)
        if self.accounting:
            seconds = np.repeat(intervals, sizes)
            joules = self.energy.joules(ids, np.repeat(times, sizes), values[:, ENERGY], values[:, POWER], seconds)
            # gpulse.usage.is_busy: SM activity judges where the GPU reports it, else utilization
            # (a null, NaN, is not busy).
            sm_active = values[:, SM_ACTIVE]
            by_activity = ~np.isnan(sm_active)
            busy = np.where(by_activity, sm_active >= self.busy_sm_activity / 100, values[:, UTIL] >= self.busy_util)
            usage_minute = minute_of
            if mig.parent:
                slots, seconds, busy, joules, by_activity, usage_minute = mig.spread(
                    slots, seconds, busy, joules, by_activity, minute_of, self.busy_sm_activity)
        for minute in touched:
            these = slice(None) if minute_of is None else minute_of == minute
            if self.accounting:
                of_minute = these if usage_minute is minute_of else usage_minute == minute
                self.usage[minute].add(slots[of_minute], seconds[of_minute], busy[of_minute], joules[of_minute],
                                       by_activity[of_minute])
            if rollup is not None:
                these = rollup if minute_of is None else these & rollup
                if not these.any():
                    continue
            bucket = self.minutes.get(minute)
            if bucket is None:
                bucket = self.minutes[minute] = MinuteRollup(minute)
            bucket.fold(ids[these], values[these, :len(ROLLUP_METRICS)], len(self.gpus))

    def _new_id(self, node: str, index: int) -> int:
        # A node forgotten and back before its rows were written takes its old ids again: two ids of one
        # GPU would give a minute two rows of one key, which one merge cannot take (PostgreSQL refuses it).
        for position, gpu_id in enumerate(self.released_ids):
            if self.gpus[gpu_id] == (node, index):
                del self.released_ids[position]
                self.ids[(node, index)] = gpu_id
                return gpu_id
        if self.free_ids:
            gpu_id = self.free_ids.pop()
            self.gpus[gpu_id] = (node, index)
        else:
            gpu_id = len(self.gpus)
            self.gpus.append((node, index))
        self.ids[(node, index)] = gpu_id
        return gpu_id

    def forget(self, node: str) -> None:
        """A pruned node: its GPUs' counters are no reference any more, and their ids go back once written."""
        gone = [key for key in self.ids if key[0] == node]
        released = [self.ids.pop(key) for key in gone]
        self.energy.forget(released)
        self.released_ids += released

    def _bound(self) -> None:
        cells = self.pending_rows()
        while cells > self.max_rows and len(self.minutes) > 1:
            oldest = min(self.minutes)
            bucket = self.minutes.pop(oldest)
            cells -= bucket.cells
            lost = int(bucket.samples.sum())
            self.lost_samples += lost
            log.error(
                "rollups: dropped the unwritten minute %s (%d GPU samples): more than %d rows wait for the database",
                bucket.start.isoformat(), lost, self.max_rows,
            )
        slots = sum(len(usage.keys) for usage in self.usage.values())
        while slots > self.max_rows and len(self.usage) > 1:
            usage = self.usage.pop(min(self.usage))
            slots -= len(usage.keys)
            lost = int(usage.sums[:, SAMPLES].sum())
            self.lost_usage_samples += lost
            log.error("usage: dropped the unwritten minute %s (%d GPU samples): more than %d rows wait for the "
                      "database", usage.start.isoformat(), lost, self.max_rows)

    def _bound_queue(self) -> None:
        # The checkpoint was never read (the database is down since ingest started):
        # samples wait whole, so bound them too.
        excess = len(self.queued) - self.max_rows
        if excess > 0:
            lost = sum(len(sample["gpus"]) for _, sample in self.queued[:excess])
            del self.queued[:excess]
            self.lost_samples += lost
            if self.accounting:  # never folded: their usage is lost with them
                self.lost_usage_samples += lost
            log.error("rollups: dropped %d GPU samples: the database has not answered since ingest started", lost)

    def pending_rows(self) -> int:
        return sum(bucket.cells for bucket in self.minutes.values())

    def usage_rows(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """The GpuUsage, UsageHour and ClusterUsage rows of every unwritten minute (usage_store merges them)."""
        gpu_rows: list[tuple] = []
        hours: dict[tuple, list] = {}
        cluster_rows = []
        for minute in sorted(self.usage):
            usage = self.usage[minute]
            rows, groups, total = usage.rows()
            if not rows:
                continue
            gpu_rows += rows
            cluster_rows.append((usage.start, int(total[0]), *total[1:]))
            hour = dt.datetime.fromtimestamp(minute - minute % 3600, dt.UTC)
            for group, sums in groups.items():
                into = hours.setdefault((hour, *group), [0.0] * len(sums))
                for column, value in enumerate(sums):
                    into[column] += value
        hour_rows = [(*key, int(sums[0]), *sums[1:]) for key, sums in hours.items()]
        return gpu_rows, hour_rows, cluster_rows

    def write(self, usage: bool = True) -> int:
        """Merge every partial minute and the checkpoint in one transaction; return rollup rows merged.

        ``usage``: write the usage too (else it stays in memory, its checkpoint where it was). On a
        database error nothing in memory changes: the next call writes it all.
        """
        if not self.resumed:
            self.resume(rollup_store.load_checkpoints(self.stream_of(""), " " + self.group))
        self.fold_queued()
        usage = usage or not self.accounting
        if (not self.minutes and self.high_water == self.written_mark
                and (not usage or not self.usage and self.usage_high_water == self.usage_written_mark)):
            return 0
        rows = [row for minute in sorted(self.minutes) for row in self.minutes[minute].rows(self.gpus)]
        usage_mark = self.usage_high_water if usage else self.usage_written_mark
        moved = {f"{self.stream_of(node)} {self.group}": (mark, usage_mark.get(node, NO_ENTRY))
                 for node, mark in self.high_water.items()
                 if (mark, usage_mark.get(node)) != (self.written_mark.get(node), self.usage_written_mark.get(node))}
        with transaction.atomic():
            rollup_store.merge_rollups(rows)
            if usage and self.accounting:
                usage_store.merge_usage(*self.usage_rows())
            rollup_store.save_checkpoints(moved)
        self.minutes = {}
        self.written_mark = dict(self.high_water)
        if usage:
            self.usage = {}
            self.usage_written_mark = dict(usage_mark)
            self.free_ids += self.released_ids
            self.released_ids = []
        return len(rows)
