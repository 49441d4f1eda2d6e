from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.live.cluster import read_node
from gpulse.health import CHECKS

HEATMAP_METRICS = (
    ("util", "Utilization %"), ("temp", "Temperature °C"), ("power", "Power W"), ("mem", "Memory %"),
    ("health", "Health"), ("usage", "Usage"), ("activity", "SM activity %"),
)
# Up to 7 days the history draws minute rollups, beyond hourly ones (history.py).
HISTORY_RANGES = (("1h", "1 hour"), ("6h", "6 hours"), ("24h", "24 hours"), ("7d", "7 days"), ("30d", "30 days"),
                  ("90d", "90 days"))


@require_GET
def overview(request):
    return render(request, "live/overview.html", {"metrics": HEATMAP_METRICS})


@require_GET
def node_detail(request, name):
    node = read_node(name)
    if node is None:
        raise Http404(f"gpulse has no data for a node named {name!r}")
    titles = {check.id: check.title for check in CHECKS}
    return render(request, "live/node.html", {"node": node, "ranges": HISTORY_RANGES, "check_titles": titles})
