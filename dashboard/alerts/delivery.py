"""One signed webhook attempt, shared by the Celery task, the "Send test" button and webhook_test.

Signature: X-Gpulse-Signature = "sha256=" + hex HMAC-SHA256(secret, f"{timestamp}.{body}"),
with the timestamp of X-Gpulse-Timestamp (unix seconds), so a receiver can
reject stale replays. Each delivery has an id (X-Gpulse-Delivery, and in the
gpulse format's signed body "delivery_id"), the same on every retry of one
notification to one endpoint, so a receiver refuses one it has already seen
within the timestamp tolerance (docs/webhook-signature.md).
"""

import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass

from dashboard.alerts import outbound
from dashboard.alerts.formats import FORMATS, Event
from dashboard.alerts.models import DeliveryAttempt, Notification, WebhookEndpoint

USER_AGENT = "gpulse-webhook/1"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def delivery_id(event_id: uuid.UUID, endpoint_id: int) -> uuid.UUID:
    """The id of delivering event ``event_id`` to endpoint ``endpoint_id``: the same for every retry (and for
    a task pushed again), different for another event or endpoint."""
    return uuid.uuid5(event_id, f"endpoint {endpoint_id}")


def signed_headers(secret: str, body: bytes, event_id, content_type: str, delivery: uuid.UUID | None = None) -> dict:
    timestamp = str(int(time.time()))
    return {
        "Content-Type": content_type,
        "User-Agent": USER_AGENT,
        "X-Gpulse-Event": str(event_id),
        "X-Gpulse-Delivery": str(delivery or uuid.uuid4()),
        "X-Gpulse-Timestamp": timestamp,
        "X-Gpulse-Signature": signature(secret, timestamp, body),
    }


@dataclass(frozen=True)
class Outcome:
    outcome: str  # DeliveryAttempt.OK, RETRY or FAILED
    status_code: int | None
    error: str
    duration_ms: float

    @property
    def ok(self) -> bool:
        return self.outcome == DeliveryAttempt.OK

    def describe(self) -> str:
        if self.ok:
            return f"delivered: HTTP {self.status_code} in {self.duration_ms:.0f} ms"
        return self.error


def _classify(status: int, excerpt: str) -> tuple[str, str]:
    if 200 <= status < 300:
        return DeliveryAttempt.OK, ""
    detail = f"HTTP {status}" + (f": {excerpt.strip()[:200]}" if excerpt.strip() else "")
    # 5xx and 429 are the receiver's temporary trouble; any other answer will not change.
    if status >= 500 or status == 429:
        return DeliveryAttempt.RETRY, detail
    return DeliveryAttempt.FAILED, detail


def send(url: str, secret: str, format_name: str, event: Event, receiver: str,
         delivery: uuid.UUID | None = None) -> Outcome:
    """Make one delivery attempt and return its outcome; never raise for a network problem.

    ``delivery``: the delivery's id (delivery_id()); a new one where none is given (a test send).
    """
    fmt = FORMATS[format_name]
    delivery = delivery or uuid.uuid4()
    body = fmt.render(event, receiver, delivery)
    headers = signed_headers(secret, body, event.event_id, fmt.content_type, delivery)
    started = time.perf_counter()
    try:
        response = outbound.post(url, body, headers)
    except outbound.TransportError as exc:
        outcome = DeliveryAttempt.FAILED if exc.permanent else DeliveryAttempt.RETRY
        status_code, error = None, exc.message
    else:
        status_code = response.status
        outcome, error = _classify(response.status, response.excerpt)
    duration_ms = (time.perf_counter() - started) * 1000
    return Outcome(outcome=outcome, status_code=status_code, error=error, duration_ms=duration_ms)


def attempt(
    endpoint: WebhookEndpoint, event: Event, number: int, notification: Notification | None = None, last: bool = False
) -> DeliveryAttempt:
    """Send ``event`` to ``endpoint`` once and log the attempt.

    ``last``: no attempt follows this one, so a temporary failure is logged as
    gave_up, never as a retry that will not come.
    """
    result = send(endpoint.url, endpoint.secret, endpoint.format, event, receiver=endpoint.name,
                  delivery=delivery_id(event.event_id, endpoint.id))
    outcome = DeliveryAttempt.GAVE_UP if last and result.outcome == DeliveryAttempt.RETRY else result.outcome
    return DeliveryAttempt.objects.create(
        endpoint=endpoint,
        notification=notification,
        event_id=event.event_id,
        kind=event.kind,
        alerts=len(event.alerts),
        attempt=number,
        status_code=result.status_code,
        error=result.error[:500],
        outcome=outcome,
        duration_ms=result.duration_ms,
    )
