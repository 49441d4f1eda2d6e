"""Rollup history for the node page and the API."""

import datetime as dt

from django.conf import settings
from django.db.models import Aggregate, Max, Min, Sum
from django.utils.module_loading import import_string

from dashboard.live.models import ROLLUP_METRICS, GpuRollup, GpuRollupHour
from dashboard.nodes.time_bucket import TimeBucket

MINUTE, HOUR = 60, 3600
# Ranges up to 7 days read minute rows, longer ones hourly rows (GpuRollupHour). The minute past 7 days:
# "since=7d" and the "until" of now each read the clock, a moment apart, and must stay a 7-day range.
MINUTE_RANGES_UP_TO = dt.timedelta(days=7, minutes=1)
# Each resolution's table and its time column.
BUCKETS = {MINUTE: (GpuRollup, "minute"), HOUR: (GpuRollupHour, "hour")}
# The most points a GPU's series holds. A range with more of its rows than this reads them merged into wider
# buckets by the database (the lowest min, the highest max, the sums over the counts): a chart is about as many
# pixels wide (Grafana's "max data points" is the panel's width), and a year of hours (8,760 rows a GPU) took
# seconds to send row by row.
MAX_POINTS = 720
# The bucket widths (s) each table's rows merge into, narrowest first: the first that keeps within MAX_POINTS.
WIDTHS = {MINUTE: (MINUTE, 5 * MINUTE, 15 * MINUTE), HOUR: (HOUR, 6 * HOUR, 24 * HOUR)}
ROWS_NAMES = {MINUTE: "minute", HOUR: "hourly"}


def resolution(since: dt.datetime, until: dt.datetime, now: dt.datetime) -> int:
    """Seconds per point for a range: hourly where it is longer than 7 days or starts before the minute
    rows kept (GPULSE_RETAIN_MINUTES_DAYS, 0: kept for ever), else minutes."""
    kept = settings.GPULSE_RETAIN_MINUTES_DAYS
    if until - since > MINUTE_RANGES_UP_TO or (kept and since < now - dt.timedelta(days=kept)):
        return HOUR
    return MINUTE


def kept_since(step: int, now: dt.datetime) -> dt.datetime | None:
    """Where the database's rows of this resolution begin (their retention); None while kept for ever."""
    days = settings.GPULSE_RETAIN_MINUTES_DAYS if step == MINUTE else settings.GPULSE_RETAIN_HOURS_DAYS
    return now - dt.timedelta(days=days) if days else None


def bucket_width(since: dt.datetime, until: dt.datetime, rows: int) -> int:
    """The narrowest of the table's WIDTHS that keeps the range within MAX_POINTS buckets (else the widest)."""
    span = (until - since).total_seconds()
    return next((width for width in WIDTHS[rows] if span / width <= MAX_POINTS), WIDTHS[rows][-1])


def _bucketed(node: str, since: dt.datetime, until: dt.datetime, rows: int, width: int) -> dict[int, dict]:
    """The node's rows of the ``rows`` table merged into ``width``-second buckets by the database: per GPU,
    the bucket starts (``ts``) and per metric of ROLLUP_METRICS, [min, mean, max] (null without a reading)."""
    model, time_column = BUCKETS[rows]
    merged: dict[str, Aggregate] = {}
    for metric in ROLLUP_METRICS:
        merged |= {f"{metric}__low": Min(f"{metric}_min"), f"{metric}__high": Max(f"{metric}_max"),
                   f"{metric}__total": Sum(f"{metric}_sum"), f"{metric}__n": Sum(f"{metric}_count")}
    first = dt.datetime.fromtimestamp(since.timestamp() // width * width, dt.UTC)  # the bucket since is in
    buckets = (model.objects.filter(node=node, **{f"{time_column}__gte": first, f"{time_column}__lte": until})
               .annotate(bucket=TimeBucket(time_column, width)).values("gpu", "bucket").annotate(**merged)
               .order_by("gpu", "bucket"))
    series: dict[int, dict] = {}
    for bucket in buckets:
        entry = series.setdefault(bucket["gpu"], {"gpu": bucket["gpu"], "ts": [], **{m: [] for m in ROLLUP_METRICS}})
        entry["ts"].append(bucket["bucket"].timestamp())
        for metric in ROLLUP_METRICS:
            count = bucket[f"{metric}__n"]
            mean = bucket[f"{metric}__total"] / count if count else None
            entry[metric].append([bucket[f"{metric}__low"], mean, bucket[f"{metric}__high"]])
    return series


def rollup_history(node: str, since: dt.datetime, until: dt.datetime) -> dict:
    """Return per-GPU series of (min, mean, max) per bucket of ``resolution`` seconds for each rolled-up
    metric: the buckets that start within since..until, of minute or hourly rows (``rollups``), merged into
    wider buckets where the range holds more than MAX_POINTS of them. ``source`` says where they come from:
    the database, or with GPULSE_HISTORY_PROMQL_URL, the long-term store for what is older than the database
    keeps (``store`` says how far, how many points, and why it could not be read)."""
    now = dt.datetime.now(dt.UTC)
    rows = resolution(since, until, now)
    width = bucket_width(since, until, rows)
    series = _bucketed(node, since, until, rows, width)
    sources = {"source": "database", "store": None}
    kept = kept_since(rows, now)
    if settings.GPULSE_HISTORY_PROMQL_URL and kept is not None and since < kept:
        read_store = import_string(settings.GPULSE_HISTORY_STORE_READER)
        sources = read_store(node, since, min(until, kept), width, series)
    return {"resolution": width, "rollups": ROWS_NAMES[rows], "since": since.timestamp(),
            "until": until.timestamp(), **sources, "gpus": [series[gpu] for gpu in sorted(series)]}
