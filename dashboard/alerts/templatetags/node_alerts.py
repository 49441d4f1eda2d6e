"""`{% node_alerts name %}`: the node page's Alerts section and its charts' threshold lines,
without the live app importing this one."""

from django import template

from dashboard.alerts.models import FIRING, PENDING, Alert, Rule
from dashboard.alerts.reasons import attach_reasons, with_reason

register = template.Library()

# The rule metrics the node page charts, by the id of its charts' metric (node.js).
CHARTED = {"gpu.util": "util", "gpu.temp": "temp", "gpu.power": "power"}


@register.inclusion_tag("alerts/_node_alerts.html", takes_context=True)
def node_alerts(context, node: str) -> dict:
    # The page's permissions decide whether each row offers "silence" (the CSRF token comes along by itself).
    return {**node_alerts_data(node), "perms": context.get("perms")}


def node_alerts_data(node: str) -> dict:
    """The alerts firing and pending on ``node``, firing first, with their reasons and actions, and the
    thresholds of the enabled rules on a charted metric that apply to it."""
    alerts = sorted(
        with_reason(Alert.objects.filter(node=node, status__in=(FIRING, PENDING)).select_related("rule")),
        key=lambda alert: (alert.status != FIRING, alert.rule.name, -1 if alert.gpu is None else alert.gpu),
    )
    attach_reasons(alerts)
    thresholds = [
        {"chart": CHARTED[rule.metric], "value": rule.threshold, "gpu": rule.gpu_index,
         "label": f"{rule.name} ({rule.comparison} {rule.threshold:g})"}
        for rule in Rule.objects.filter(enabled=True, metric__in=CHARTED)
        if rule.matches_node(node)
    ]
    firing_gpus = sorted({alert.gpu for alert in alerts if alert.status == FIRING and alert.gpu is not None})
    return {"node": node, "alerts": alerts, "charted": {"thresholds": thresholds, "firing_gpus": firing_gpus}}
