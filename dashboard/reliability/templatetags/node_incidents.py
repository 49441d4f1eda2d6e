"""`{% node_incidents name %}`: the node page's incidents, without the live app importing this one;
`|component_label`: a component's name for people."""

from django import template

from dashboard.reliability.components import label
from dashboard.reliability.models import Incident

register = template.Library()

# Incidents the node page lists, newest first.
SHOWN = 20


@register.inclusion_tag("reliability/_node_incidents.html")
def node_incidents(node: str) -> dict:
    return {"incidents": Incident.objects.filter(node=node)[:SHOWN]}


@register.filter
def component_label(name: str) -> str:
    """A component's name for people ("gpu_memory": "GPU memory"); an imported one as written."""
    return label(name)
