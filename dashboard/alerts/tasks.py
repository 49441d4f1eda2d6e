"""Webhook-queue tasks that turn alert transitions into webhook deliveries.

They run on their own queue and worker (``celery -Q webhooks``), apart from
benchmark control: receivers that trickle or never answer hold webhook
threads only. dispatch claims a transition (compare-and-set on
``processed``), so a duplicated or redelivered message sends nothing twice,
then queues one ``deliver`` per endpoint. A delivery whose endpoint already
has its cap of attempts in flight joins the endpoint's line and ends, holding
no thread (dashboard/alerts/leases.py): the attempt that frees a slot queues
the first in line again. So one slow receiver holds at most
GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY threads, the other endpoints' deliveries
keep flowing, and a busy endpoint's deliveries wait without polling.
"""

import logging
import random
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from dashboard.alerts import delivery, leases
from dashboard.alerts.formats import Event
from dashboard.alerts.models import DeliveryAttempt, Transition, WebhookEndpoint
from workers.celery_app import WEBHOOK_QUEUE, app

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
# Outcomes after which no attempt of the same delivery follows.
FINAL = (DeliveryAttempt.OK, DeliveryAttempt.FAILED, DeliveryAttempt.GAVE_UP)


def max_attempts() -> int:
    return settings.GPULSE_WEBHOOK_MAX_ATTEMPTS


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt number ``attempt`` (1-based)."""
    base = settings.GPULSE_WEBHOOK_RETRY_BASE
    # Jitter keeps many deliveries that failed together from retrying together.
    return min(MAX_BACKOFF, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)


@app.task(name="gpulse.alerts.dispatch", queue=WEBHOOK_QUEUE, ignore_result=True)
def dispatch(transition_id: int) -> int:
    """Claim a transition and queue a delivery per interested endpoint; return how many."""
    claimed = Transition.objects.filter(id=transition_id, processed=None).update(processed=timezone.now())
    if not claimed:
        return 0
    transition = Transition.objects.select_related("alert__rule").filter(id=transition_id).first()
    if transition is None or not transition.notify:
        return 0
    severity = transition.alert.rule.severity
    endpoints = [e for e in WebhookEndpoint.objects.filter(enabled=True) if e.wants(severity)]
    for endpoint in endpoints:
        deliver.apply_async((transition_id, endpoint.id))
    return len(endpoints)


def waiter(transition_id: int, number: int) -> str:
    """How attempt ``number`` of a transition stands in its endpoint's line."""
    return f"{transition_id}:{number}"


def _call_waiter(endpoint_id: int) -> Callable[[str], None]:
    def call(first: str) -> None:
        transition_id, number = (int(part) for part in first.split(":"))
        deliver.apply_async((transition_id, endpoint_id, number))

    return call


@app.task(name="gpulse.alerts.look_again", queue=WEBHOOK_QUEUE, ignore_result=True)
def look_again(transition_id: int, endpoint_id: int, number: int) -> str:
    """Deliver attempt ``number`` that waits in its endpoint's line, in case no freed slot called it
    (one whose lease ran out calls nobody); nothing to do where one already did."""
    if not leases.leave_line(endpoint_id, waiter(transition_id, number)):
        return "called"
    return deliver(transition_id, endpoint_id, number)


@app.task(name="gpulse.alerts.deliver", queue=WEBHOOK_QUEUE, ignore_result=True)
def deliver(transition_id: int, endpoint_id: int, number: int = 1) -> str:
    """Make attempt ``number`` once the endpoint has a free slot; queue the next one on a temporary failure."""
    endpoint = WebhookEndpoint.objects.filter(id=endpoint_id, enabled=True).first()
    transition = Transition.objects.select_related("alert__rule").filter(id=transition_id).first()
    if endpoint is None or transition is None:
        log.info("webhook %s: endpoint or transition %s gone, nothing to deliver", endpoint_id, transition_id)
        return "gone"
    # What is sent is what the database says, not what a task asks for (issue 31): a transition dispatch
    # claimed, that notifies, to an endpoint that wants its severity, not yet delivered there.
    if transition.processed is None or not transition.notify or not endpoint.wants(transition.alert.rule.severity):
        log.warning("webhook %s: transition %s was never dispatched to it; not sent", endpoint.name, transition_id)
        return "refused"
    if DeliveryAttempt.objects.filter(endpoint=endpoint, transition=transition, outcome__in=FINAL).exists():
        log.warning("webhook %s: transition %s was delivered or given up already; not sent again",
                    endpoint.name, transition_id)
        return "done"
    last = number >= max_attempts()
    with leases.endpoint_slot(endpoint.id, waiter(transition_id, number), _call_waiter(endpoint.id)) as held:
        if not held:
            # Not an attempt: in the endpoint's line, leaving this thread to other endpoints.
            look_again.apply_async((transition_id, endpoint_id, number), countdown=leases.lease_seconds())
            return "busy"
        logged = delivery.attempt(endpoint, Event.from_transition(transition), number, transition, last=last)
    if logged.outcome == DeliveryAttempt.RETRY:
        log.warning("webhook %s attempt %d: %s; retrying", endpoint.name, number, logged.error)
        deliver.apply_async((transition_id, endpoint_id, number + 1), countdown=backoff(number))
    elif logged.outcome != DeliveryAttempt.OK:
        log.error(
            "webhook %s: %s on event %s at attempt %d: %s",
            endpoint.name, logged.get_outcome_display(), logged.event_id, number, logged.error,
        )
    return logged.outcome
