"""JSON API for the cluster and its nodes (authentication: dashboard.accounts.middleware)."""

import datetime as dt

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dashboard.json_api import parse_time
from dashboard.live.cluster import read_cluster, read_node, read_probes, read_recent
from dashboard.nodes.history import rollup_history


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
