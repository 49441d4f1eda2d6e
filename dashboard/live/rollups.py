"""Minute rollups of GPU readings: accumulated in memory, written in bulk."""

import datetime as dt

from dashboard.live.models import ROLLUP_METRICS, GpuRollup


class RollupAccumulator:
    """Collect (min, sum, max, count) per GPU and metric for the current minute.

    Samples are grouped by the minute of their own ``ts``; a minute is written
    once a sample of a later minute arrives, plus a grace minute for late
    nodes (flush() with ``now``), so a row is written once and never updated.
    """

    def __init__(self):
        # minute -> (node, gpu) -> [samples, then (min, sum, max, n) per metric]
        self.minutes: dict[int, dict[tuple[str, int], list]] = {}

    def add(self, sample: dict) -> None:
        minute = int(sample["ts"] // 60) * 60
        bucket = self.minutes.setdefault(minute, {})
        node = sample["node"]
        for gpu in sample["gpus"]:
            if gpu.get("lost"):
                continue
            acc = bucket.get((node, gpu["index"]))
            if acc is None:
                acc = bucket[(node, gpu["index"])] = [0] + [None, 0.0, None, 0] * len(ROLLUP_METRICS)
            acc[0] += 1
            for i, metric in enumerate(ROLLUP_METRICS):
                value = gpu.get(metric)
                if value is None:
                    continue
                base = 1 + 4 * i
                if acc[base] is None or value < acc[base]:
                    acc[base] = value
                acc[base + 1] += value
                if acc[base + 2] is None or value > acc[base + 2]:
                    acc[base + 2] = value
                acc[base + 3] += 1

    def flush(self, now: float, grace: float = 60.0) -> int:
        """Write every minute that ended more than ``grace`` seconds ago; return rows written."""
        done = [m for m in self.minutes if m + 60 + grace <= now]
        rows = []
        for minute in sorted(done):
            start = dt.datetime.fromtimestamp(minute, dt.timezone.utc)
            for (node, gpu), acc in self.minutes.pop(minute).items():
                fields = {}
                for i, metric in enumerate(ROLLUP_METRICS):
                    low, total, high, n = acc[1 + 4 * i: 5 + 4 * i]
                    fields[f"{metric}_min"] = low
                    fields[f"{metric}_mean"] = total / n if n else None
                    fields[f"{metric}_max"] = high
                rows.append(GpuRollup(node=node, gpu=gpu, minute=start, samples=acc[0], **fields))
        if rows:
            # ignore_conflicts: a second ingest consumer may have written the same minute.
            GpuRollup.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)
        return len(rows)
