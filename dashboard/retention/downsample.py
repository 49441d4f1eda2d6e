"""Hourly rollups from the minute ones: what the node page draws once the minutes are pruned.

An hour's row per GPU is its minutes merged: min of the mins, max of the maxes, the sums and counts
summed, the mean their quotient, the samples summed. An hour is computed once it ended SETTLE ago
(ingest writes a minute's last part within seconds), and computed again at a pass within RECOMPUTE
of that where its minutes gained samples, so a minute written late (a node's buffered samples after
an outage) is picked up; each write is an upsert, so a pass that runs twice, or in two workers at
once, leaves the same rows. The watermark says every hour before it was computed at least once: the
first pass starts at the oldest minute, a pass after a stop catches up from there, and minutes are
pruned only below it (prune.py).
"""

import datetime as dt

from django.db.models import Max, Min, Sum

from dashboard.live.models import ROLLUP_METRICS, GpuRollup, GpuRollupHour
from dashboard.retention.models import Watermark

HOUR = dt.timedelta(hours=1)
SETTLE = dt.timedelta(minutes=2)
RECOMPUTE = dt.timedelta(hours=6)
WATERMARK = "hourly rollups"
# Rows per upsert transaction: short, so ingest's rollup write never waits long for SQLite's one writer.
WRITE_ROWS = 1000
UPDATED = ["samples", *(f"{m}_{s}" for m in ROLLUP_METRICS for s in ("min", "mean", "max", "sum", "count"))]


def floor_hour(at: dt.datetime) -> dt.datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def downsampled_until() -> dt.datetime | None:
    """Every hour before this has its hourly rows; None before the first pass."""
    return Watermark.objects.filter(name=WATERMARK).values_list("until", flat=True).first()


def _advance(until: dt.datetime) -> None:
    """Move the watermark forward to ``until``, never back (another worker may be ahead)."""
    Watermark.objects.bulk_create([Watermark(name=WATERMARK, until=until)], ignore_conflicts=True)
    Watermark.objects.filter(name=WATERMARK, until__lt=until).update(until=until)


def hour_rows(hour: dt.datetime) -> list[GpuRollupHour]:
    """The hourly rows of ``hour``, one per GPU with minutes in it, merged by the database."""
    merged = {"n_samples": Sum("samples")}
    for metric in ROLLUP_METRICS:
        merged[f"n_{metric}_min"] = Min(f"{metric}_min")
        merged[f"n_{metric}_max"] = Max(f"{metric}_max")
        merged[f"n_{metric}_sum"] = Sum(f"{metric}_sum")
        merged[f"n_{metric}_count"] = Sum(f"{metric}_count")
    groups = (GpuRollup.objects.filter(minute__gte=hour, minute__lt=hour + HOUR)
              .values("node", "gpu").order_by().annotate(**merged))
    rows = []
    for group in groups:
        row = GpuRollupHour(node=group["node"], gpu=group["gpu"], hour=hour, samples=group["n_samples"])
        for metric in ROLLUP_METRICS:
            total, count = group[f"n_{metric}_sum"], group[f"n_{metric}_count"]
            setattr(row, f"{metric}_min", group[f"n_{metric}_min"])
            setattr(row, f"{metric}_max", group[f"n_{metric}_max"])
            setattr(row, f"{metric}_sum", total)
            setattr(row, f"{metric}_count", count)
            setattr(row, f"{metric}_mean", total / count if count else None)
        rows.append(row)
    return rows


def write_hour(hour: dt.datetime) -> int:
    """(Re)compute ``hour``'s rows from its minutes; return how many. Read first, written in short
    transactions: on SQLite the read takes no write lock."""
    rows = hour_rows(hour)
    for first in range(0, len(rows), WRITE_ROWS):
        GpuRollupHour.objects.bulk_create(rows[first:first + WRITE_ROWS], update_conflicts=True,
                                          unique_fields=["node", "gpu", "hour"], update_fields=UPDATED)
    return len(rows)


def unchanged(hour: dt.datetime) -> bool:
    """Whether ``hour``'s rows already hold every sample of its minutes. A minute only gains samples (ingest
    merges its parts, a late one adds), so equal totals mean there is nothing to compute again: two sums,
    where computing the hour again is a GROUP BY over its minutes and an upsert of a row per GPU."""
    minutes = GpuRollup.objects.filter(minute__gte=hour, minute__lt=hour + HOUR).aggregate(n=Sum("samples"))["n"]
    return minutes == GpuRollupHour.objects.filter(hour=hour).aggregate(n=Sum("samples"))["n"]


def downsample(now: dt.datetime) -> int:
    """Compute the hours due at ``now``: those never done, and those of the last RECOMPUTE whose minutes
    changed since; return the rows written."""
    ready = floor_hour(now - SETTLE)  # every hour before it ended SETTLE ago or more
    start = ready - RECOMPUTE
    done = downsampled_until()
    if done is None:
        oldest = GpuRollup.objects.filter(minute__lt=start).aggregate(oldest=Min("minute"))["oldest"]
        if oldest is not None:
            start = floor_hour(oldest)
    else:
        start = min(start, floor_hour(done))
    written = 0
    hour = start
    while hour < ready:
        if done is None or hour >= done or not unchanged(hour):
            written += write_hour(hour)
            _advance(hour + HOUR)
        hour += HOUR
    return written
