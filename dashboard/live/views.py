import datetime as dt

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.live.cluster import read_cluster, read_node, read_probes, read_recent
from dashboard.live.health import health
from dashboard.live.history import parse_time, rollup_history

HEATMAP_METRICS = (("util", "Utilization %"), ("temp", "Temperature °C"), ("power", "Power W"), ("mem", "Memory %"))
HISTORY_RANGES = (("1h", "1 hour"), ("6h", "6 hours"), ("24h", "24 hours"), ("7d", "7 days"))


@require_GET
def overview(request):
    return render(request, "live/overview.html", {"metrics": HEATMAP_METRICS})


@require_GET
def node_detail(request, name):
    node = read_node(name)
    if node is None:
        raise Http404(f"gpulse has no data for a node named {name!r}")
    return render(request, "live/node.html", {"node": node, "ranges": HISTORY_RANGES})


@require_GET
def api_cluster(request):
    return JsonResponse({"nodes": read_cluster()})


@require_GET
def api_node(request, name):
    node = read_node(name)
    if node is None:
        return JsonResponse({"error": f"no node named {name!r}"}, status=404)
    now = dt.datetime.now(dt.timezone.utc)
    try:
        since = parse_time(request.GET.get("since"), default=now - dt.timedelta(hours=1))
        until = parse_time(request.GET.get("until"), default=now)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    node["history"] = rollup_history(name, since, until)
    node["probes"] = read_probes(name)
    node["recent"] = read_recent(name) if request.GET.get("recent") == "1" else None
    return JsonResponse(node)


@login_not_required
@require_GET
def healthz(request):
    ok, checks = health()
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)
