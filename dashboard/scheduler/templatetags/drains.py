"""`{% node_drains name %}`: the node page's Scheduler section, without the live app importing this one."""

from django import template

from dashboard.scheduler.models import DrainRecord

register = template.Library()

# Drain records the node page lists, newest first.
SHOWN = 20


@register.inclusion_tag("scheduler/_node_drains.html")
def node_drains(node: str) -> dict:
    return {"drains": DrainRecord.objects.filter(node=node)[:SHOWN]}
