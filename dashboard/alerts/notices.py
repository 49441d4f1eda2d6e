"""What became of each alert's latest notification, for the alerts page.

An alert's "notified" flag only says it was not silenced; what the operator
needs is whether the receivers got it. Each alert's latest notifying
transition, and the notification (its node's group) it went out in, is found
by a subquery of the alert query itself, and every endpoint's latest attempt
at those notifications in one more query, so the page costs the same however
many alerts fire. An endpoint's attempt counts for an alert only where the
endpoint wants the alert's severity: a group's delivery carries only those.
"""

from dataclasses import dataclass, field

from django.db.models import OuterRef, QuerySet, Subquery

from dashboard.alerts.models import DeliveryAttempt, Transition, WebhookEndpoint

# How each attempt outcome reads once it is an endpoint's latest: a retry is still coming.
LABELS = {
    DeliveryAttempt.OK: "ok",
    DeliveryAttempt.RETRY: "retrying",
    DeliveryAttempt.FAILED: "failed",
    DeliveryAttempt.GAVE_UP: "gave up",
}


@dataclass(frozen=True)
class Delivery:
    endpoint: str
    outcome: str  # a DeliveryAttempt outcome, for the page's class names
    label: str  # what it reads as: ok, retrying, failed, gave up
    error: str
    alerts: int  # how many alerts the delivery carried, this one among them


@dataclass
class Notice:
    # silenced, no webhook, queued (no attempt yet), or sent (see deliveries)
    state: str
    deliveries: list[Delivery] = field(default_factory=list)


def with_latest_notice(alerts: QuerySet) -> QuerySet:
    """Annotate each alert with ``latest_notification_id``: the group its latest notifying transition went out in
    (None while that one waits for dispatch)."""
    latest = (Transition.objects.filter(alert=OuterRef("pk"), notify=True).order_by("-created", "-id")
              .values("notification_id")[:1])
    return alerts.annotate(latest_notification_id=Subquery(latest))


def attach_notices(alerts: list) -> None:
    """Set ``alert.notice`` on alerts annotated by ``with_latest_notice``."""
    ids = [a.latest_notification_id for a in alerts if a.notified and a.latest_notification_id is not None]
    latest: dict[int, dict[int, DeliveryAttempt]] = {}
    attempts = (
        DeliveryAttempt.objects.filter(notification_id__in=ids)
        .select_related("endpoint")
        .order_by("notification_id", "endpoint__name", "-attempt", "-id")
    )
    for attempt in attempts:
        latest.setdefault(attempt.notification_id, {}).setdefault(attempt.endpoint_id, attempt)
    endpoints = list(WebhookEndpoint.objects.filter(enabled=True)) if any(a.notified for a in alerts) else []
    for alert in alerts:
        if not alert.notified:
            alert.notice = Notice("silenced")
            continue
        group = latest.get(alert.latest_notification_id, {}).values()
        sent = [a for a in group if a.endpoint.wants(alert.rule.severity)]
        if sent:
            alert.notice = Notice("sent", [_delivery(a) for a in sent])
        elif any(e.wants(alert.rule.severity) for e in endpoints):
            alert.notice = Notice("queued")
        else:
            alert.notice = Notice("no webhook")


def _delivery(attempt: DeliveryAttempt) -> Delivery:
    return Delivery(attempt.endpoint.name, attempt.outcome, LABELS[attempt.outcome], attempt.error, attempt.alerts)
