"""JSON API for node health (authentication: dashboard.accounts.middleware)."""

from collections import Counter

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dashboard.health.models import HealthChange
from dashboard.health.node_health import VERDICT_ORDER, worst_first
from dashboard.health.reading import read_health, read_node_health
from dashboard.live.cluster import read_cluster
from gpulse import health as catalogue
from gpulse.status import DOWN

# Verdict changes a node's health answer lists, newest first.
HEALTH_HISTORY = 50
# The order /health/ lists nodes in (static/gpulse/health.js): down, then the verdicts worst first.
LISTED_ORDER = {DOWN: 0, **{verdict: rank + 1 for verdict, rank in VERDICT_ORDER.items()}}


def _listed_as(entry: dict) -> str:
    """How /health/ lists and counts a node: a down one has no verdict, and is the first thing to see."""
    return DOWN if entry["status"] == DOWN else entry["verdict"]


@require_GET
def health(request):
    """Every known node's status and verdict, as /health/ lists them: down nodes first, then worst verdict
    first, with the worst finding's reason and action; ``counts``: how many nodes are down and of each verdict."""
    status = {entry["node"]: entry["status"] for entry in read_cluster()}
    # A node only the second read knows (new since the first) has no status yet: nothing current is known of it.
    nodes = [{"node": name, "status": status.get(name, DOWN), **node.summary()} for name, node in read_health().items()]
    nodes.sort(key=lambda entry: (LISTED_ORDER[_listed_as(entry)], -entry["findings"], entry["node"]))
    counts = Counter(map(_listed_as, nodes))
    return JsonResponse({"counts": {listed: counts[listed] for listed in LISTED_ORDER}, "nodes": nodes})


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
