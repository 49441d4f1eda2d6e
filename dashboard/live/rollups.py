"""Minute rollups of GPU readings: accumulated in memory, written in bulk."""

import datetime as dt
import itertools
from collections import deque
from collections.abc import Iterator

import numpy as np

from dashboard.live.models import ROLLUP_METRICS, GpuRollup


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

    def rows(self, minute: int) -> Iterator[GpuRollup]:
        self.fold()
        start = dt.datetime.fromtimestamp(minute, dt.timezone.utc)
        mean = np.divide(self.total, self.count, out=np.zeros_like(self.total), where=self.count > 0)
        present = (self.count > 0).tolist()
        low, mean, high, samples = self.low.tolist(), mean.tolist(), self.high.tolist(), self.samples.tolist()
        for (node, gpu), i in self.index.items():
            fields = {}
            for m, metric in enumerate(ROLLUP_METRICS):
                seen = present[i][m]
                fields[f"{metric}_min"] = low[i][m] if seen else None
                fields[f"{metric}_mean"] = mean[i][m] if seen else None
                fields[f"{metric}_max"] = high[i][m] if seen else None
            yield GpuRollup(node=node, gpu=gpu, minute=start, samples=samples[i], **fields)


class RollupAccumulator:
    """Collect (min, mean, max) per GPU and metric for the current minute.

    Samples are grouped by the minute of their own ``ts``; a minute is written
    once a sample of a later minute arrives, plus a grace minute for late
    nodes (flush() with ``now``), so a row is written once and never updated.
    A finished minute is written over several ticks, ROWS_PER_FLUSH rows at a
    time: all 8,000 rows of a 1,000-node minute at once held ingest for most
    of a second, and the next tick's frame with it.
    """

    ROWS_PER_FLUSH = 1000

    def __init__(self):
        self.minutes: dict[int, MinuteRollup] = {}
        self.queued: list[dict] = []
        self.unwritten: deque[Iterator[GpuRollup]] = deque()  # rows of finished minutes, not yet written

    def add(self, sample: dict) -> None:
        # Only queued: ingest calls this as samples arrive, before the tick's frame
        # is out; the per-GPU work waits for flush(), after it.
        self.queued.append(sample)

    def flush(self, now: float, grace: float = 60.0) -> int:
        """Take in what was added (call once per tick); write up to ROWS_PER_FLUSH rows of the
        minutes that ended more than ``grace`` seconds ago; return rows written."""
        for sample in self.queued:
            minute = int(sample["ts"] // 60) * 60
            bucket = self.minutes.get(minute)
            if bucket is None:
                bucket = self.minutes[minute] = MinuteRollup()
            bucket.add(sample["node"], sample["gpus"])
        self.queued = []
        for minute in sorted(self.minutes):
            if minute + 60 + grace <= now:
                self.unwritten.append(self.minutes.pop(minute).rows(minute))
            else:
                self.minutes[minute].fold()
        rows = []
        while self.unwritten and len(rows) < self.ROWS_PER_FLUSH:
            chunk = list(itertools.islice(self.unwritten[0], self.ROWS_PER_FLUSH - len(rows)))
            if len(chunk) < self.ROWS_PER_FLUSH - len(rows):
                self.unwritten.popleft()
            rows += chunk
        if rows:
            try:
                # ignore_conflicts: a second ingest consumer may have written the same minute.
                GpuRollup.objects.bulk_create(rows, batch_size=self.ROWS_PER_FLUSH, ignore_conflicts=True)
            except Exception:
                self.unwritten.appendleft(iter(rows))  # written on a later flush, once the database answers
                raise
        return len(rows)
