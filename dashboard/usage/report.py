"""Usage and cost over a time range, by user, job or node: what the /usage/ page and the API show.

Tables read UsageHour, so a range is whole hours: ``since`` rounds down and
``until`` up to the hour. Cost is priced at query time with the current
prices (dashboard/usage/prices.py): a corrected price corrects the past too.

- GPU-hours: allocated GPU-hours (gpulse/usage.py: a job, a pod or a process
  holds the GPU); cost = GPU-hours × the model's $/GPU-hour.
- Idle GPU-hours: allocated but not busy (gpulse/usage.py: SM activity below GPULSE_BUSY_SM_ACTIVITY where
  the GPUs report it, else utilization below GPULSE_BUSY_UTIL); idle cost alike. ``busy_by`` says which of
  the two judged most of the allocated time ("sm_activity" or "utilization"; null without allocated time).
- kWh: the GPUs' energy (by node: every GPU, allocated or not); energy cost = kWh × $/kWh.
- MIG: a group's MIG instances are a row of their own per profile (``mig_profile``, "" for whole GPUs):
  an instance counts its share of its GPU (dashboard/rollups/usage.py), so its GPU-hours, cost and kWh are
  that fraction of a whole GPU's.
"""

import datetime as dt
import math
import time

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Sum
from django.db.models.functions import TruncHour

from dashboard.live.models import ClusterUsage, UsageHour
from dashboard.redis_client import redis_client
from dashboard.usage.idle import idle_long_enough
from dashboard.usage.prices import Prices
from gpulse.keys import Keys
from gpulse.usage import busy_by

# The owner fields each grouping shows, the first being what it groups by.
GROUPINGS = {"user": ("user",), "job": ("job", "pod", "user"), "node": ("node",)}
# Every grouping's rows are apart per MIG profile too: "1g.10gb", "" for whole GPUs.
MIG_PROFILE = "mig_profile"
HOUR = 3600
MAX_SPAN = dt.timedelta(days=400)
MINUTE_POINTS_UP_TO = dt.timedelta(days=2)  # longer ranges chart hourly points


class BadRange(ValueError):
    pass


def hour_range(since: dt.datetime, until: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Whole hours covering since..until; BadRange where it is empty, backwards or too long."""
    if until <= since:
        raise BadRange(f"'until' ({until.isoformat()}) is not after 'since' ({since.isoformat()})")
    if until - since > MAX_SPAN:
        raise BadRange(f"a range of at most {MAX_SPAN.days} days, not {(until - since).days}")
    start = math.floor(since.timestamp() / HOUR) * HOUR
    end = math.ceil(until.timestamp() / HOUR) * HOUR
    return dt.datetime.fromtimestamp(start, dt.UTC), dt.datetime.fromtimestamp(end, dt.UTC)


def _figures(sums: dict, prices: Prices) -> dict:
    """What a table shows of a group's _sums() (None where the group has no rows)."""
    allocated, busy = sums["allocated"] or 0.0, sums["busy"] or 0.0
    kwh = (sums["joules"] or 0.0) / 3.6e6
    return {
        "gpu_hours": allocated / HOUR,
        "busy_pct": 100.0 * busy / allocated if allocated else None,
        "busy_by": busy_by(allocated, sums["by_activity"] or 0.0),
        "idle_gpu_hours": (allocated - busy) / HOUR,
        "cost": sums["cost"] or 0.0,
        "idle_cost": sums["idle_cost"] or 0.0,
        "kwh": kwh,
        "energy_cost": kwh * prices.per_kwh,
    }


def _sums(prices: Prices) -> dict:
    """The aggregates of each group, cost included: priced in SQL (a CASE on the GPU model), so the
    database orders the groups by cost and only the costliest come back."""
    price = prices.gpu_hour_sql("model")
    return {"seconds": Sum("seconds"), "allocated": Sum("allocated_seconds"), "busy": Sum("busy_seconds"),
            "by_activity": Sum("sm_activity_seconds"), "joules": Sum("energy_j"),
            "cost": Sum(F("allocated_seconds") * price) / HOUR,
            "idle_cost": Sum((F("allocated_seconds") - F("busy_seconds")) * price) / HOUR}


def usage_table(by: str, since: dt.datetime, until: dt.datetime, prices: Prices, limit: int | None = None) -> dict:
    """The costliest ``limit`` users, jobs or nodes (all where None) over whole hours since..until, and the totals."""
    fields = GROUPINGS[by]
    start, end = hour_range(since, until)
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if by != "node":  # a GPU nobody held belongs to no user or job (its energy shows by node)
        rows = rows.filter(allocated_seconds__gt=0)
    sums = _sums(prices)
    groups = rows.values(*fields, MIG_PROFILE).order_by().annotate(**sums).order_by("-cost", "-joules", *fields,
                                                                                    MIG_PROFILE)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # A month of jobs is 100,000+ groups: let them hash in memory rather than sort on disk.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL work_mem = '64MB'")
        table = []
        for group in groups if limit is None else groups[:limit]:
            entry = {**{field: group[field] for field in (*fields, MIG_PROFILE)}, **_figures(group, prices)}
            if by == "node":
                entry["allocated_pct"] = 100.0 * group["allocated"] / group["seconds"] if group["seconds"] else None
            table.append(entry)
        totals = rows.aggregate(**sums)
    return {"by": by, "since": start.timestamp(), "until": end.timestamp(), "rows": table,
            "totals": _figures(totals, prices), "prices": prices.as_dict()}


def allocation_series(since: dt.datetime, until: dt.datetime) -> dict:
    """GPUs reporting, allocated and busy over time: per minute up to two days, per hour beyond.

    Only whole buckets ingest has written all of are charted: it writes the usage in parts, every
    GPULSE_USAGE_FLUSH_INTERVAL seconds, so the minute or hour in progress, or one that ended since
    the last write, would read as a dip (issue 32). Grafana leaves such a partial bucket out too.
    """
    step = 60 if until - since <= MINUTE_POINTS_UP_TO else HOUR
    written = time.time() - settings.GPULSE_USAGE_FLUSH_INTERVAL - settings.GPULSE_TICK
    until = min(until, dt.datetime.fromtimestamp(written // step * step, dt.UTC))
    rows = ClusterUsage.objects.filter(minute__gte=since, minute__lt=until)
    if step == 60:
        points = rows.order_by("minute").values_list("minute", "seconds", "allocated_seconds", "busy_seconds")
    else:
        points = (rows.annotate(at=TruncHour("minute")).values("at").order_by("at")
                  .annotate(s=Sum("seconds"), a=Sum("allocated_seconds"), b=Sum("busy_seconds"))
                  .values_list("at", "s", "a", "b"))
    series: dict[str, list] = {"ts": [], "gpus": [], "allocated": [], "busy": []}
    for at, seconds, allocated, busy in points:
        series["ts"].append(at.timestamp())
        series["gpus"].append(seconds / step)
        series["allocated"].append(allocated / step)
        series["busy"].append(busy / step)
    return {"resolution": step, **series}


def idle_now(prices: Prices, limit: int = 100) -> list[dict]:
    """GPUs and MIG instances allocated but idle right now for at least GPULSE_IDLE_MIN_SECONDS, longest first,
    with how long and what they cost per hour (an instance: its share of its GPU's price)."""
    raw = redis_client().get(Keys().idle_allocations)
    entries = orjson.loads(raw) if raw else []
    now = time.time()
    lasting = [entry for entry in entries if idle_long_enough(entry["since"], now, settings.GPULSE_IDLE_MIN_SECONDS)]
    # An entry an ingest before MIG wrote has no share: a whole GPU's.
    return [{"mig_instance": "", "mig_profile": "", "share": 1.0, **entry, "idle_s": max(0.0, now - entry["since"]),
             "usd_per_hour": prices.gpu_hour(entry["model"]) * entry.get("share", 1.0)} for entry in lasting[:limit]]
