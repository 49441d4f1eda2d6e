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
   committed. Until then they stay pending in Redis; a restarted ingest claims
   every pending entry (its own and a dead consumer's) before reading new ones.
3. Exactly once across a crash between COMMIT and XACK. The same transaction
   as the upsert records a checkpoint: the newest entry id folded in, per
   stream and consumer group. Entries are folded in id order, and one at or
   below the high-water mark (the checkpoint, or the newest entry folded since)
   is skipped here; ingest still shows it live.
4. Database outages. A failed write changes nothing in memory: the aggregates
   stay (merging further samples) and are written by the next attempt. They
   are bounded at GPULSE_ROLLUP_MAX_ROWS (node, gpu, minute) cells; past it the
   oldest minute is dropped, logged and counted in ``lost_samples``.

Limits. One checkpoint is exact for one ingest consumer reading the stream
in order: run one ingest at a time (stop the old one before the new starts).
Sharding the stream over several ingests needs a checkpoint per shard.
"""

import datetime as dt
import logging
from collections.abc import Iterator

import numpy as np
from django.db import transaction

from dashboard.live import rollup_store, usage_store
from dashboard.live.models import ROLLUP_METRICS
from dashboard.live.usage import UsageAccumulator
from gpulse.usage import BUSY_UTIL

log = logging.getLogger("gpulse.ingest")


def entry_key(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id ("1700000000000-3") as a pair that orders like the stream."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class MinuteRollup:
    """(min, sum, max, count) per GPU and metric over one minute, as numpy arrays.

    add() only queues a GPU's readings; fold() merges the queue into the arrays
    in a few numpy calls, so the per-GPU Python work is one tuple, not a loop
    of comparisons per metric.
    """

    def __init__(self):
        self.index: dict[tuple[str, int], int] = {}  # (node, gpu) -> row of the arrays
        self.queued_rows: list[int] = []
        self.queued_values: list[tuple] = []
        metrics = len(ROLLUP_METRICS)
        self.samples = np.zeros(0, dtype=np.int64)
        self.low = np.zeros((0, metrics))
        self.total = np.zeros((0, metrics))
        self.high = np.zeros((0, metrics))
        self.count = np.zeros((0, metrics), dtype=np.int64)

    def add(self, node: str, gpus: list[dict]) -> None:
        index, rows, values = self.index, self.queued_rows, self.queued_values
        for gpu in gpus:
            if gpu.get("lost"):
                continue
            key = (node, gpu["index"])
            row = index.get(key)
            if row is None:
                row = index[key] = len(index)
            rows.append(row)
            values.append(tuple(map(gpu.get, ROLLUP_METRICS)))

    def fold(self) -> None:
        if not self.queued_rows:
            return
        grow = len(self.index) - len(self.samples)
        if grow > 0:
            metrics = len(ROLLUP_METRICS)
            self.samples = np.concatenate([self.samples, np.zeros(grow, dtype=np.int64)])
            self.low = np.concatenate([self.low, np.full((grow, metrics), np.inf)])
            self.total = np.concatenate([self.total, np.zeros((grow, metrics))])
            self.high = np.concatenate([self.high, np.full((grow, metrics), -np.inf)])
            self.count = np.concatenate([self.count, np.zeros((grow, metrics), dtype=np.int64)])
        rows = np.array(self.queued_rows)
        values = np.array(self.queued_values, dtype=float)  # a null reading becomes NaN
        self.queued_rows, self.queued_values = [], []
        present = ~np.isnan(values)
        # ufunc.at, because one GPU may appear twice in a batch (a backlog flushed after an outage).
        np.add.at(self.samples, rows, 1)
        np.fmin.at(self.low, rows, values)  # fmin/fmax skip NaN
        np.fmax.at(self.high, rows, values)
        np.add.at(self.total, rows, np.where(present, values, 0.0))
        np.add.at(self.count, rows, present)

    def rows(self, minute: int) -> Iterator[tuple]:
        """Yield one row per GPU in rollup_store.COLUMNS order."""
        self.fold()
        start = dt.datetime.fromtimestamp(minute, dt.UTC)
        mean = np.divide(self.total, self.count, out=np.zeros_like(self.total), where=self.count > 0)
        present = (self.count > 0).tolist()
        low, mean, high = self.low.tolist(), mean.tolist(), self.high.tolist()
        total, count, samples = self.total.tolist(), self.count.tolist(), self.samples.tolist()
        for (node, gpu), i in self.index.items():
            values = [node, gpu, start, samples[i]]
            for m in range(len(ROLLUP_METRICS)):
                seen = present[i][m]
                values += [low[i][m] if seen else None, mean[i][m] if seen else None,
                           high[i][m] if seen else None, total[i][m], count[i][m]]
            yield tuple(values)


class RollupAccumulator:
    """Gather samples into partial minutes; write() merges them into the database with the checkpoint.

    ``stream`` names the checkpoint: the stream key and the consumer group. The
    usage accounting (dashboard/live/usage.py) rides along: same samples, same
    transaction, same checkpoint.
    """

    def __init__(self, stream: str, max_rows: int = 500_000, busy_util: float = BUSY_UTIL):
        self.stream = stream
        self.max_rows = max_rows
        self.minutes: dict[int, MinuteRollup] = {}
        self.usage = UsageAccumulator(busy_util)
        self.queued: list[tuple[tuple[int, int] | None, dict]] = []
        # The newest entry folded into the rollups (checkpoint or since); None until the
        # checkpoint is read: entries wait in ``queued`` meanwhile.
        self.high_water: tuple[int, int] | None = None
        self.written_mark: tuple[int, int] | None = None  # what the database's checkpoint says
        self.duplicates = 0  # entries skipped as already counted
        self.lost_samples = 0  # samples dropped for the bound during a database outage

    def add(self, sample: dict, entry_id: bytes | str | None = None) -> None:
        """Queue a sample (the per-GPU work waits for fold_queued(), after the tick's frame).

        ``entry_id``: the stream entry it came in; None for a sample from no stream,
        which is always counted.
        """
        self.queued.append((None if entry_id is None else entry_key(entry_id), sample))

    def fold_queued(self) -> None:
        """Fold queued samples into their minutes, in entry order, skipping those already counted."""
        if self.high_water is None:
            self._bound_queue()
            return
        for key, sample in self.queued:
            if key is not None:
                if key <= self.high_water:
                    self.duplicates += 1
                    continue
                self.high_water = key
            minute = int(sample["ts"] // 60) * 60
            bucket = self.minutes.get(minute)
            if bucket is None:
                bucket = self.minutes[minute] = MinuteRollup()
            bucket.add(sample["node"], sample["gpus"])
            self.usage.add(minute, sample)
        self.queued = []
        for bucket in self.minutes.values():
            bucket.fold()
        self._bound()

    def _bound(self) -> None:
        cells = sum(len(bucket.index) for bucket in self.minutes.values())
        while cells > self.max_rows and len(self.minutes) > 1:
            oldest = min(self.minutes)
            bucket = self.minutes.pop(oldest)
            self.usage.drop(oldest)
            cells -= len(bucket.index)
            lost = int(bucket.samples.sum())
            self.lost_samples += lost
            log.error(
                "rollups: dropped the unwritten minute %s (%d GPU samples): more than %d rows wait for the database",
                dt.datetime.fromtimestamp(oldest, dt.UTC).isoformat(), lost, self.max_rows,
            )

    def _bound_queue(self) -> None:
        # The checkpoint was never read (the database is down since ingest started):
        # samples wait whole, so bound them too.
        excess = len(self.queued) - self.max_rows
        if excess > 0:
            lost = sum(len(sample["gpus"]) for _, sample in self.queued[:excess])
            del self.queued[:excess]
            self.lost_samples += lost
            log.error("rollups: dropped %d GPU samples: the database has not answered since ingest started", lost)

    def pending_rows(self) -> int:
        return sum(len(bucket.index) for bucket in self.minutes.values())

    def write(self) -> int:
        """Merge every partial minute and the checkpoint in one transaction; return rows merged.

        On a database error nothing in memory changes: the next call writes it all.
        """
        if self.high_water is None:
            self.high_water = self.written_mark = rollup_store.load_checkpoint(self.stream)
        self.fold_queued()
        if not self.minutes and self.high_water == self.written_mark:
            return 0
        rows = [row for minute in sorted(self.minutes) for row in self.minutes[minute].rows(minute)]
        with transaction.atomic():
            rollup_store.merge_rollups(rows)
            usage_store.merge_usage(self.usage)
            if self.high_water != self.written_mark:
                rollup_store.save_checkpoint(self.stream, self.high_water)
        self.minutes = {}
        self.usage.clear()
        self.written_mark = self.high_water
        return len(rows)
