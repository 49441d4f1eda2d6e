"""The /reliability/ page: what fails and how often, open incidents, the checkpoint planner, the import form."""

import datetime as dt

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.reliability import importer, report
from dashboard.reliability.api import parse_range, read_plan
from dashboard.reliability.components import label
from dashboard.reliability.models import Incident

RANGES = (("30d", "30 d"), ("90d", "90 d"), ("365d", "1 year"), ("", "All"))
OPEN_SHOWN = 50
# The planner's fields as the form names them, and what it starts with besides the measured MTBF.
PLANNER_DEFAULTS = {"nodes": "128", "hours": "72", "checkpoint_write_s": "300"}


def _planner(query, measured_mtbf_h: float | None) -> dict:
    """The planner form's values and, when they are valid, its plan; else the error naming the field."""
    values = {name: query.get(name, default) for name, default in PLANNER_DEFAULTS.items()}
    values["node_mtbf_h"] = query.get("node_mtbf_h") or (f"{measured_mtbf_h:.1f}" if measured_mtbf_h else "")
    if not values["node_mtbf_h"]:
        return {"values": values}  # nothing measured yet, nothing given: the page asks for it
    try:
        plan = read_plan(values, None)
    except ValueError as exc:
        return {"values": values, "error": str(exc)}
    return {"values": values, "plan": plan, "p_interrupt_pct": plan.p_interrupt * 100,
            "lost_pct": plan.lost_fraction * 100}


@require_http_methods(["GET", "POST"])
def reliability_page(request):
    if request.method == "POST":
        return _import(request)
    query = request.GET
    context = {"ranges": RANGES, "selected": query.get("since", ""), "since": query.get("since", ""),
               "until": query.get("until", "")}
    try:
        since, until = parse_range(query)
    except ValueError as exc:
        return render(request, "reliability/reliability.html", {**context, "error": str(exc)}, status=400)
    numbers = report.summary(since, until)
    components = [{"name": name, "label": label(name), "count": count}
                  for name, count in numbers["by_component"].items()]
    open_incidents = Incident.objects.filter(end=None)[:OPEN_SHOWN]
    context.update(
        numbers=numbers, components=components, open_incidents=open_incidents,
        planner=_planner(query, report.measured_node_mtbf_h()),
        chart={"weeks": [dt.datetime.fromisoformat(week).replace(tzinfo=dt.UTC).timestamp()
                         for week in numbers["weekly"]["weeks"]],
               "series": [{"component": name, "label": label(name), "counts": counts}
                          for name, counts in numbers["weekly"]["components"].items()]},
    )
    return render(request, "reliability/reliability.html", context)


def _import(request):
    if not request.user.is_staff:
        raise PermissionDenied("importing incidents is for staff users")
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "Nothing imported: choose a CSV file.")
        return redirect("reliability:page")
    try:
        result = importer.import_csv(upload.read(), request.POST.get("nodes"), request.POST.get("since"),
                                     request.POST.get("until"))
    except importer.ImportRefused as exc:
        messages.error(request, f"Nothing imported: {exc}")
    else:
        messages.success(request, f"Imported {result['incidents']} incidents ({result['planned']} planned) and "
                                  f"{result['node_hours']:g} node-hours watched.")
    return redirect("reliability:page")
