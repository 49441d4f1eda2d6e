"""Rollup history for the node page and the API."""

import datetime as dt
import math

from django.conf import settings

from dashboard.live.models import ROLLUP_METRICS, GpuRollup, GpuRollupHour

RELATIVE_UNITS = {"m": 60, "h": 3600, "d": 86400}
MINUTE, HOUR = 60, 3600
# Ranges up to 7 days read minute rows, longer ones hourly rows (GpuRollupHour). The minute past 7 days:
# "since=7d" and the "until" of now each read the clock, a moment apart, and must stay a 7-day range.
MINUTE_RANGES_UP_TO = dt.timedelta(days=7, minutes=1)
# Each resolution's table and its time column.
BUCKETS = {MINUTE: (GpuRollup, "minute"), HOUR: (GpuRollupHour, "hour")}


def parse_time(value: str | None, default: dt.datetime) -> dt.datetime:
    """Accept unix seconds, ISO 8601, or a span back from now like "15m", "6h", "7d"; return it in UTC.

    Every bad value raises ValueError, the caller's 400: one that does not parse, and one a
    datetime cannot hold (1e20, inf, nan, 99999999999d), which Python raises as OverflowError.
    """
    if not value:
        return default
    hint = "(use unix seconds, ISO 8601, or a span like 15m, 6h, 7d)"
    out_of_range = f"out of range: {value!r} is not a time between the years 1 and 9999 {hint}"
    now = dt.datetime.now(dt.UTC)
    if value[-1] in RELATIVE_UNITS and value[:-1].isdigit():
        try:
            return now - dt.timedelta(seconds=int(value[:-1]) * RELATIVE_UNITS[value[-1]])
        except OverflowError:
            raise ValueError(out_of_range) from None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(out_of_range)
        try:
            return dt.datetime.fromtimestamp(seconds, dt.UTC)
        except (OverflowError, OSError, ValueError):  # beyond time_t, or beyond year 9999
            raise ValueError(out_of_range) from None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not a time: {value!r} {hint}") from None
    if not parsed.tzinfo:
        return parsed.replace(tzinfo=dt.UTC)
    try:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
        return parsed.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError(out_of_range) from None


def resolution(since: dt.datetime, until: dt.datetime, now: dt.datetime) -> int:
    """Seconds per point for a range: hourly where it is longer than 7 days or starts before the minute
    rows kept (GPULSE_RETAIN_MINUTES_DAYS, 0: kept for ever), else minutes."""
    kept = settings.GPULSE_RETAIN_MINUTES_DAYS
    if until - since > MINUTE_RANGES_UP_TO or (kept and since < now - dt.timedelta(days=kept)):
        return HOUR
    return MINUTE


def rollup_history(node: str, since: dt.datetime, until: dt.datetime) -> dict:
    """Return per-GPU series of (min, mean, max) per minute or per hour (``resolution``, seconds) for each
    rolled-up metric: the buckets that start within since..until."""
    step = resolution(since, until, dt.datetime.now(dt.UTC))
    model, time_column = BUCKETS[step]
    columns = [f"{m}_{s}" for m in ROLLUP_METRICS for s in ("min", "mean", "max")]
    rows = (
        model.objects.filter(node=node, **{f"{time_column}__gte": since, f"{time_column}__lte": until})
        .order_by("gpu", time_column)
        .values_list("gpu", time_column, *columns)
    )
    series: dict[int, dict] = {}
    for gpu, start, *values in rows:
        entry = series.setdefault(gpu, {"gpu": gpu, "ts": [], **{m: [] for m in ROLLUP_METRICS}})
        entry["ts"].append(start.timestamp())
        for i, metric in enumerate(ROLLUP_METRICS):
            entry[metric].append(values[3 * i: 3 * i + 3])
    return {"resolution": step, "since": since.timestamp(), "until": until.timestamp(), "gpus": list(series.values())}
