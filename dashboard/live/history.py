"""Rollup history for the node page and the API."""

import datetime as dt

from dashboard.live.models import ROLLUP_METRICS, GpuRollup

RELATIVE_UNITS = {"m": 60, "h": 3600, "d": 86400}


def parse_time(value: str | None, default: dt.datetime) -> dt.datetime:
    """Accept unix seconds, ISO 8601, or a span back from now like "15m", "6h", "7d"."""
    if not value:
        return default
    now = dt.datetime.now(dt.UTC)
    if value[-1] in RELATIVE_UNITS and value[:-1].isdigit():
        return now - dt.timedelta(seconds=int(value[:-1]) * RELATIVE_UNITS[value[-1]])
    try:
        return dt.datetime.fromtimestamp(float(value), dt.UTC)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not a time: {value!r} (use unix seconds, ISO 8601, or a span like 15m, 6h, 7d)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def rollup_history(node: str, since: dt.datetime, until: dt.datetime) -> dict:
    """Return per-GPU series of minute (min, mean, max) for each rolled-up metric."""
    columns = [f"{m}_{s}" for m in ROLLUP_METRICS for s in ("min", "mean", "max")]
    rows = (
        GpuRollup.objects.filter(node=node, minute__gte=since, minute__lte=until)
        .order_by("gpu", "minute")
        .values_list("gpu", "minute", *columns)
    )
    series: dict[int, dict] = {}
    for gpu, minute, *values in rows:
        entry = series.setdefault(gpu, {"gpu": gpu, "ts": [], **{m: [] for m in ROLLUP_METRICS}})
        entry["ts"].append(minute.timestamp())
        for i, metric in enumerate(ROLLUP_METRICS):
            entry[metric].append(values[3 * i: 3 * i + 3])
    return {"resolution": 60, "since": since.timestamp(), "until": until.timestamp(), "gpus": list(series.values())}
