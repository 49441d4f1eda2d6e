"""Webhook-queue tasks that turn alert transitions into webhook notifications, grouped per node.

They run on their own queue and worker (``celery -Q webhooks``), apart from
benchmark control: receivers that trickle or never answer hold webhook
threads only. dispatch claims a transition (compare-and-set on
``processed``), so a duplicated or redelivered message sends nothing twice,
and adds it to its node's open Notification, opening one when none is open
and queuing its flush GPULSE_ALERT_GROUP_WAIT later (Alertmanager's
``group_by: [node]`` and ``group_wait``): Xid 79 on 8 GPUs pages once. flush
claims the group the same way and queues one ``deliver`` per endpoint that
wants at least one of its alerts; each delivery carries the alerts of the
severities its endpoint wants. A delivery whose endpoint already has its cap
of attempts in flight joins the endpoint's line and ends, holding no thread
(dashboard/alerts/leases.py): the attempt that frees a slot queues the first
in line again. So one slow receiver holds at most
GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY threads, the other endpoints' deliveries
keep flowing, and a busy endpoint's deliveries wait without polling.
"""

import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.alerts import delivery, leases
from dashboard.alerts.formats import Event
from dashboard.alerts.models import DeliveryAttempt, Notification, Transition, WebhookEndpoint
from dashboard.celery_app import app
from gpulse.celery_contract import WEBHOOK_QUEUE

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
# Outcomes after which no attempt of the same delivery follows.
FINAL = (DeliveryAttempt.OK, DeliveryAttempt.FAILED, DeliveryAttempt.GAVE_UP)
# An open group this long past its wait lost its flush message (a worker died between opening it and queuing
# the flush): the next alert that joins it queues the flush again.
FLUSH_LOST_AFTER = timedelta(seconds=60)


def max_attempts() -> int:
    return settings.GPULSE_WEBHOOK_MAX_ATTEMPTS


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt number ``attempt`` (1-based)."""
    base = settings.GPULSE_WEBHOOK_RETRY_BASE
    # Jitter keeps many deliveries that failed together from retrying together.
    return min(MAX_BACKOFF, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)


def _due(group: Notification) -> datetime:
    return group.created + timedelta(seconds=settings.GPULSE_ALERT_GROUP_WAIT)


def _queue_flush(group: Notification, now: datetime) -> None:
    flush.apply_async((group.id,), countdown=max(0.0, (_due(group) - now).total_seconds()))


@app.task(name="gpulse.alerts.dispatch", queue=WEBHOOK_QUEUE, ignore_result=True)
def dispatch(transition_id: int) -> int:
    """Claim a transition and add it to its node's open notification; return 1 where it did, else 0."""
    now = timezone.now()
    # One transaction: a worker that dies between the claim and the join leaves the transition unclaimed.
    with transaction.atomic():
        claimed = Transition.objects.filter(id=transition_id, processed=None).update(processed=now)
        transition = Transition.objects.select_related("alert", "notification").filter(id=transition_id).first()
        if transition is None or not transition.notify:
            return 0
        if claimed:
            _join(transition, now)
            return 1
    group = transition.notification
    if group is not None and group.processed is None:
        # Pushed again, perhaps by a worker that died before it queued the flush of the group it opened.
        _queue_flush(group, now)
    return 0


def _join(transition: Transition, now: datetime) -> None:
    """Add ``transition`` to its node's open group, or open one and queue its flush; in the caller's transaction.

    Never left out of a flushed group, never in two: the join writes the open group's row
    (``filter(id=…, processed=None).update(…)``) before it sets the transition's group, in one
    transaction, and flush claims with the same compare-and-set before it reads the group's transitions.
    Both write one row, so they take turns: PostgreSQL locks the row and checks ``processed`` again once
    the other transaction ended, SQLite runs one writing transaction at a time (IMMEDIATE). A join that
    goes first has committed the transition's group by the time the claim returns, and the flush reads it;
    a join after the claim updates no row and opens a new group. Two dispatches that both find no open
    group both try to open one: the partial unique constraint (one open group per node) refuses the
    second, which joins the first's.
    """
    node = transition.alert.node
    while True:
        group = Notification.objects.filter(node=node, processed=None).first()
        if group is not None:
            if not Notification.objects.filter(id=group.id, processed=None).update(updated=now):
                continue  # flushed meanwhile: open a new one
            if now - _due(group) > FLUSH_LOST_AFTER:
                transaction.on_commit(lambda group=group: _queue_flush(group, now))
            break
        try:
            with transaction.atomic():  # a savepoint: losing the race rolls back this insert only
                group = Notification.objects.create(node=node, created=now, updated=now)
        except IntegrityError:
            continue  # another dispatch opened the node's group first: join that one
        # Queued once the group is committed, or the flush could find no row to claim.
        transaction.on_commit(lambda group=group: _queue_flush(group, now))
        break
    Transition.objects.filter(id=transition.id).update(notification=group)


@app.task(name="gpulse.alerts.flush", queue=WEBHOOK_QUEUE, ignore_result=True)
def flush(notification_id: int) -> int:
    """Close a node's group and queue a delivery per endpoint that wants one of its alerts; return how many."""
    claimed = Notification.objects.filter(id=notification_id, processed=None).update(processed=timezone.now())
    if not claimed:
        return 0
    # Read after the claim: every join that got the row first has committed (see _join).
    severities = set(
        Transition.objects.filter(notification_id=notification_id, notify=True)
        .values_list("alert__rule__severity", flat=True)
    )
    endpoints = [e for e in WebhookEndpoint.objects.filter(enabled=True) if any(e.wants(s) for s in severities)]
    for endpoint in endpoints:
        deliver.apply_async((notification_id, endpoint.id))
    return len(endpoints)


def waiter(notification_id: int, number: int) -> str:
    """How attempt ``number`` of a notification stands in its endpoint's line."""
    return f"{notification_id}:{number}"


def _call_waiter(endpoint_id: int) -> Callable[[str], None]:
    def call(first: str) -> None:
        notification_id, number = (int(part) for part in first.split(":"))
        deliver.apply_async((notification_id, endpoint_id, number))

    return call


# The delivery tasks are named apart from those of the per-transition deliveries before notification groups
# (gpulse.alerts.deliver, .look_again), whose messages carried a transition's id: a worker of this version
# drops such a message as an unregistered task rather than read its id as a notification's.
@app.task(name="gpulse.alerts.look_again_notification", queue=WEBHOOK_QUEUE, ignore_result=True)
def look_again(notification_id: int, endpoint_id: int, number: int) -> str:
    """Deliver attempt ``number`` that waits in its endpoint's line, in case no freed slot called it
    (one whose lease ran out calls nobody); nothing to do where one already did."""
    if not leases.leave_line(endpoint_id, waiter(notification_id, number)):
        return "called"
    return deliver(notification_id, endpoint_id, number)


@app.task(name="gpulse.alerts.deliver_notification", queue=WEBHOOK_QUEUE, ignore_result=True)
def deliver(notification_id: int, endpoint_id: int, number: int = 1) -> str:
    """Make attempt ``number`` once the endpoint has a free slot; queue the next one on a temporary failure."""
    endpoint = WebhookEndpoint.objects.filter(id=endpoint_id, enabled=True).first()
    notification = Notification.objects.filter(id=notification_id).first()
    if endpoint is None or notification is None:
        log.info("webhook %s: endpoint or notification %s gone, nothing to deliver", endpoint_id, notification_id)
        return "gone"
    # What is sent is what the database says, not what a task asks for (issue 31): a notification flush
    # claimed, with the alerts that joined it, notify and the endpoint wants, not yet delivered there.
    wanted = [
        t for t in notification.transitions.filter(notify=True).select_related("alert__rule")
        if endpoint.wants(t.alert.rule.severity)
    ]
    if notification.processed is None or not wanted:
        log.warning("webhook %s: notification %s was never flushed to it; not sent", endpoint.name, notification_id)
        return "refused"
    if DeliveryAttempt.objects.filter(endpoint=endpoint, notification=notification, outcome__in=FINAL).exists():
        log.warning("webhook %s: notification %s was delivered or given up already; not sent again",
                    endpoint.name, notification_id)
        return "done"
    last = number >= max_attempts()
    with leases.endpoint_slot(endpoint.id, waiter(notification_id, number), _call_waiter(endpoint.id)) as held:
        if not held:
            # Not an attempt: in the endpoint's line, leaving this thread to other endpoints.
            look_again.apply_async((notification_id, endpoint_id, number), countdown=leases.lease_seconds())
            return "busy"
        event = Event.from_transitions(notification.event_id, wanted)
        logged = delivery.attempt(endpoint, event, number, notification, last=last)
    if logged.outcome == DeliveryAttempt.RETRY:
        log.warning("webhook %s attempt %d: %s; retrying", endpoint.name, number, logged.error)
        deliver.apply_async((notification_id, endpoint_id, number + 1), countdown=backoff(number))
    elif logged.outcome != DeliveryAttempt.OK:
        log.error(
            "webhook %s: %s on event %s at attempt %d: %s",
            endpoint.name, logged.get_outcome_display(), logged.event_id, number, logged.error,
        )
    return logged.outcome
