"""What was found and what to do about it, for each alert on the alerts page and the node page.

Both come from the alert's latest transition's reason: after the condition
and the value (which the pages say in words from the rule) come, for the
metrics that carry them, the finding and the action
(dashboard/alerts/conditions.py, split_reason). The reason is found by a
subquery of the alert query itself, so rows cost no query each.
"""

from django.db.models import OuterRef, QuerySet, Subquery

from dashboard.alerts.conditions import split_reason
from dashboard.alerts.models import Transition


def with_reason(alerts: QuerySet) -> QuerySet:
    """Annotate each alert with ``latest_reason``, its latest transition's reason."""
    latest = Transition.objects.filter(alert=OuterRef("pk")).order_by("-created", "-id").values("reason")[:1]
    return alerts.annotate(latest_reason=Subquery(latest))


def attach_reasons(alerts) -> None:
    """Set ``alert.reason`` (what was found) and ``alert.action`` on alerts annotated by ``with_reason``."""
    for alert in alerts:
        alert.reason, alert.action = split_reason(alert.latest_reason or "")
