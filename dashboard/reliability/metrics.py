"""The reliability record's part of /metrics (dashboard/metrics.py): incidents by component, node MTBF."""

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dashboard.reliability.models import Incident
from dashboard.reliability.report import measured_node_mtbf_h


def reliability_families():
    incidents = CounterMetricFamily(
        "gpulse_incidents", "incidents recorded (watched and imported), by component and whether planned",
        labels=["component", "planned"],
    )
    for component, planned, count in (Incident.objects.values_list("component", "planned")
                                      .annotate(n=Count("id")).order_by("component", "planned")):
        incidents.add_metric([component, "true" if planned else "false"], count)
    yield incidents
    mtbf = measured_node_mtbf_h()
    if mtbf is not None:  # none before the first unexpected incident: no number to compare
        yield GaugeMetricFamily("gpulse_node_mtbf_seconds",
                                "node-time watched per unexpected incident, over everything recorded",
                                value=mtbf * 3600)
