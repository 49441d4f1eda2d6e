"""JSON API for the cluster and its nodes (authentication: dashboard.accounts.middleware)."""

import datetime as dt

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dashboard.live.cluster import read_cluster, read_health, read_node, read_node_health, read_probes, read_recent
from dashboard.live.history import parse_time, rollup_history
from dashboard.live.models import HealthChange
from dashboard.live.node_health import VERDICT_ORDER, worst_first
from gpulse import health as catalogue

# Verdict changes a node's health answer lists, newest first.
HEALTH_HISTORY = 50


@require_GET
def cluster(request):
    return JsonResponse({"nodes": read_cluster()})


@require_GET
def node(request, name):
    found = read_node(name)
    if found is None:
        return JsonResponse({"error": f"no node named {name!r}"}, status=404)
    now = dt.datetime.now(dt.UTC)
    try:
        since = parse_time(request.GET.get("since"), default=now - dt.timedelta(hours=1))
        until = parse_time(request.GET.get("until"), default=now)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    found["history"] = rollup_history(name, since, until)
    found["probes"] = read_probes(name)
    found["recent"] = read_recent(name) if request.GET.get("recent") == "1" else None
    return JsonResponse(found)


@require_GET
def health(request):
    """Every known node's verdict, worst first, with the worst finding's reason and action."""
    nodes = [{"node": name, **node.summary()} for name, node in read_health().items()]
    nodes.sort(key=lambda entry: (VERDICT_ORDER[entry["verdict"]], -entry["findings"], entry["node"]))
    return JsonResponse({"nodes": nodes})


@require_GET
def node_health(request, name):
    """The node's verdict, every check (a "pass" for each checked id with no finding), its verdict changes."""
    node = read_node_health(name)
    if node is None:
        return JsonResponse({"error": f"no node named {name!r}"}, status=404)
    checks = [
        {"id": check, "gpu": gpu, "status": status, "reason": finding.reason,
         "action": catalogue.action(check, status), "since": finding.since}
        for (check, gpu, status), finding in worst_first(node.findings)
    ]
    found = {check for check, _, _ in node.findings}
    checks += [{"id": check, "gpu": None, "status": catalogue.PASS, "reason": "", "action": "", "since": None}
               for check in node.checked if check not in found]
    history = [
        {"at": row.at.timestamp(), "from": row.old, "to": row.new, "reason": row.reason}
        for row in HealthChange.objects.filter(node=name).order_by("-at", "-id")[:HEALTH_HISTORY]
    ]
    return JsonResponse({"node": name, "verdict": node.verdict, "since": node.since, "checks": checks,
                         "history": history})
