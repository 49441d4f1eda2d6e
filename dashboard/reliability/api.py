"""JSON API: the fleet's reliability numbers, its incidents, the checkpoint planner, and importing history.

GET /api/v1/reliability?since=…&until=…: counts, by component, MTBF and MTTR (report.py).
GET /api/v1/reliability/incidents?open=true|false&node=…&limit=…: newest first.
GET /api/v1/reliability/plan?nodes=N&hours=H&checkpoint_write_s=δ[&node_mtbf_h=M]: checkpoint.py.
POST /api/v1/reliability/import (staff, multipart): importer.py.
"""

import datetime as dt
import math

from django.http import JsonResponse
from django.views.decorators.http import require_GET, require_POST

from dashboard.json_api import json_error, parse_time
from dashboard.reliability import checkpoint, importer, report
from dashboard.reliability.models import Incident

DEFAULT_LIMIT, MAX_LIMIT = 200, 10_000
MAX_NODES = 1_000_000
MAX_HOURS = 100_000.0
MAX_MTBF_H = 1e9


def parse_range(query) -> tuple[dt.datetime, dt.datetime]:
    """since (default: everything recorded) and until (default: now); ValueError says which is bad."""
    now = dt.datetime.now(dt.UTC)
    times = []
    for name, default in (("since", report.EPOCH), ("until", now)):
        try:
            times.append(parse_time(query.get(name), default=default))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    if times[0] >= times[1]:
        raise ValueError("since: must be before until")
    return times[0], times[1]


@require_GET
def reliability(request):
    try:
        since, until = parse_range(request.GET)
    except ValueError as exc:
        return json_error(str(exc), 400)
    return JsonResponse(report.summary(since, until))


@require_GET
def incidents(request):
    rows = Incident.objects.all()
    wanted = request.GET.get("open")
    if wanted is not None:
        if wanted not in ("true", "false"):
            return json_error(f"open: true or false, not {wanted!r}", 400)
        rows = rows.filter(end__isnull=wanted == "true")
    if request.GET.get("node"):
        rows = rows.filter(node=request.GET["node"])
    limit = request.GET.get("limit", str(DEFAULT_LIMIT))
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
        return json_error(f"limit: a whole number from 1 to {MAX_LIMIT}, not {limit!r}", 400)
    return JsonResponse({"incidents": [report.incident_dict(row) for row in rows[:int(limit)]]})


def positive(query, name: str, maximum: float, whole: bool = False) -> float:
    """The query's ``name`` as a number above 0 and at most ``maximum``; ValueError names the field."""
    value = query.get(name)
    if value is None or value == "":
        raise ValueError(f"{name}: required")
    try:
        number = int(value) if whole else float(value)
    except ValueError:
        raise ValueError(f"{name}: {'a whole number' if whole else 'a number'}, not {value!r}") from None
    if not math.isfinite(number) or not 0 < number <= maximum:
        raise ValueError(f"{name}: must be above 0 and at most {maximum:g}, not {value!r}")
    return number


def read_plan(query, measured_mtbf_h: float | None) -> checkpoint.Plan:
    """The plan the query asks for, at its node_mtbf_h or else the measured one; ValueError names the field."""
    nodes = int(positive(query, "nodes", MAX_NODES, whole=True))
    hours = positive(query, "hours", MAX_HOURS)
    write_s = positive(query, "checkpoint_write_s", MAX_HOURS * 3600)
    if query.get("node_mtbf_h") is not None:
        mtbf = positive(query, "node_mtbf_h", MAX_MTBF_H)
    elif measured_mtbf_h is None:
        raise ValueError("node_mtbf_h: required: no unexpected incident is recorded to measure it from")
    else:
        mtbf = measured_mtbf_h
    return checkpoint.plan(nodes, hours, write_s, mtbf)


@require_GET
def plan(request):
    measured = request.GET.get("node_mtbf_h") is None
    try:
        result = read_plan(request.GET, report.measured_node_mtbf_h() if measured else None)
    except ValueError as exc:
        return json_error(str(exc), 400)
    return JsonResponse({**result.as_dict(), "measured": measured})


@require_POST
def import_history(request):
    if not request.user.is_staff:
        return json_error("permission denied: importing incidents is for staff users", 403)
    upload = request.FILES.get("file")
    if upload is None:
        return json_error("file: required (a CSV with the header start,node,component)", 400)
    try:
        result = importer.import_csv(upload.read(), request.POST.get("nodes"), request.POST.get("since"),
                                     request.POST.get("until"))
    except importer.ImportRefused as exc:
        return json_error(str(exc), 400)
    return JsonResponse(result, status=201)
