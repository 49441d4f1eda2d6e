"""Control-queue tasks that turn alert transitions into webhook deliveries.

dispatch claims a transition (compare-and-set on ``processed``), so a duplicated
or redelivered message sends nothing twice, then queues one ``deliver`` per
endpoint: a slow or failing receiver never delays the others.
"""

import logging
import random

from django.conf import settings
from django.utils import timezone

from dashboard.alerts import delivery
from dashboard.alerts.formats import Event
from dashboard.alerts.models import DeliveryAttempt, Transition, WebhookEndpoint
from workers.celery_app import CONTROL_QUEUE, app

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0


def max_attempts() -> int:
    return settings.GPULSE_WEBHOOK_MAX_ATTEMPTS


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt number ``attempt`` (1-based)."""
    base = settings.GPULSE_WEBHOOK_RETRY_BASE
    # Jitter keeps many deliveries that failed together from retrying together.
    return min(MAX_BACKOFF, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)


@app.task(name="gpulse.alerts.dispatch", queue=CONTROL_QUEUE, ignore_result=True)
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


@app.task(bind=True, name="gpulse.alerts.deliver", queue=CONTROL_QUEUE, ignore_result=True, max_retries=None)
def deliver(self, transition_id: int, endpoint_id: int) -> str:
    """Make one attempt; on a temporary failure, retry later with exponential backoff and jitter."""
    number = self.request.retries + 1
    endpoint = WebhookEndpoint.objects.filter(id=endpoint_id, enabled=True).first()
    transition = Transition.objects.select_related("alert__rule").filter(id=transition_id).first()
    if endpoint is None or transition is None:
        log.info("webhook %s: endpoint or transition %s gone, nothing to deliver", endpoint_id, transition_id)
        return "gone"
    logged = delivery.attempt(endpoint, Event.from_transition(transition), number, transition)
    if logged.outcome == DeliveryAttempt.RETRY and number < max_attempts():
        log.warning("webhook %s attempt %d: %s; retrying", endpoint.name, number, logged.error)
        raise self.retry(countdown=backoff(number))
    if logged.outcome != DeliveryAttempt.OK:
        log.error(
            "webhook %s: giving up on event %s after attempt %d: %s",
            endpoint.name, logged.event_id, number, logged.error,
        )
    return logged.outcome
