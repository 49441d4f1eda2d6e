"""The fleet's reliability numbers over a time range, from the incidents and the node-hours watched.

Planned incidents are counted apart and in no rate. Node MTBF is node-hours
watched ÷ unexpected incidents, with the chi-square interval of a Poisson
count (interval.py). MTTR is the mean time from an unexpected incident's start
to its end (closed ones), with the interval of the mean of exponential repair
times, 2S/χ²(1−α/2; 2n) to 2S/χ²(α/2; 2n) for n repairs taking S in all.
"""

import datetime as dt
from collections import Counter

from dashboard.reliability.components import label
from dashboard.reliability.interval import chi2_quantile, mtbf_interval
from dashboard.reliability.models import Exposure, Incident

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
TOP_NODES = 10
WEEK = dt.timedelta(days=7)


def node_hours(since: dt.datetime, until: dt.datetime) -> float:
    """Node-hours watched within [since, until): each window's share that falls in the range."""
    total = 0.0
    for start, end, hours in Exposure.objects.filter(start__lt=until, end__gt=since).values_list(
            "start", "end", "node_hours"):
        span = (end - start).total_seconds()
        inside = (min(end, until) - max(start, since)).total_seconds()
        total += hours * inside / span if span > 0 else 0.0
    return total


def _monday(moment: dt.datetime) -> dt.date:
    day = moment.astimezone(dt.UTC).date()
    return day - dt.timedelta(days=day.weekday())


def weekly(starts_by_component: list[tuple[dt.datetime, str]], since: dt.datetime, until: dt.datetime) -> dict:
    """Unexpected incidents per ISO week (from Monday, UTC) by component, over the weeks with any."""
    if not starts_by_component:
        return {"weeks": [], "components": {}}
    first = max(_monday(since), min(_monday(start) for start, _ in starts_by_component))
    last = _monday(min(until, max(start for start, _ in starts_by_component)))
    weeks = [first + dt.timedelta(days=7 * n) for n in range((last - first).days // 7 + 1)]
    position = {week: index for index, week in enumerate(weeks)}
    series: dict[str, list[int]] = {}
    for start, component in starts_by_component:
        series.setdefault(component, [0] * len(weeks))[position[_monday(start)]] += 1
    return {"weeks": [week.isoformat() for week in weeks], "components": dict(sorted(series.items()))}


def _hours_or_none(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summary(since: dt.datetime, until: dt.datetime) -> dict:
    rows = list(Incident.objects.filter(start__gte=since, start__lt=until).values_list(
        "node", "component", "start", "end", "planned"))
    unexpected = [row for row in rows if not row[4]]
    watched = node_hours(since, until)
    failures = len(unexpected)
    mtbf = low = high = None
    if watched > 0:
        low, high = mtbf_interval(watched, failures)
        mtbf = watched / failures if failures else None
    repairs = [(end - start).total_seconds() / 3600 for _, _, start, end, _ in unexpected if end is not None]
    mttr = mttr_low = mttr_high = None
    if repairs:
        total = sum(repairs)
        mttr = total / len(repairs)
        mttr_low = 2 * total / chi2_quantile(0.975, 2 * len(repairs))
        mttr_high = 2 * total / chi2_quantile(0.025, 2 * len(repairs))
    by_component = Counter(component for _, component, _, _, _ in unexpected)
    by_node = Counter(node for node, _, _, _, _ in unexpected)
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "unexpected": failures,
        "planned": len(rows) - failures,
        "open": sum(1 for row in rows if row[3] is None),
        "by_component": dict(by_component.most_common()),
        "component_labels": {name: label(name) for name in by_component},
        "node_hours": round(watched, 3),
        "failures_per_1000_node_days": failures / (watched / 24) * 1000 if watched > 0 else None,
        "node_mtbf_h": _hours_or_none(mtbf),
        "node_mtbf_h_95": [_hours_or_none(low), _hours_or_none(high)],
        "mttr_h": _hours_or_none(mttr),
        "mttr_h_95": [_hours_or_none(mttr_low), _hours_or_none(mttr_high)],
        "repairs": len(repairs),
        "top_nodes": [{"node": node, "incidents": count} for node, count in by_node.most_common(TOP_NODES)],
        "weekly": weekly([(start, component) for _, component, start, _, _ in unexpected], since, until),
    }


def measured_node_mtbf_h() -> float | None:
    """The node MTBF over everything recorded; None before the first unexpected incident."""
    failures = Incident.objects.filter(planned=False).count()
    watched = node_hours(EPOCH, dt.datetime.now(dt.UTC))
    return watched / failures if failures and watched > 0 else None


def incident_dict(incident: Incident) -> dict:
    return {
        "node": incident.node, "component": incident.component, "gpu": incident.gpu, "cause": incident.cause,
        "start": incident.start.isoformat(), "end": None if incident.end is None else incident.end.isoformat(),
        "planned": incident.planned, "planned_by": incident.planned_by, "source": incident.source,
    }
