"""A slow receiver never delays another endpoint's notifications.

Real parts: the webhook worker on its own queue and pool (as devtools/stack.py
and docker-compose.yml run it), a receiver that answers one byte a second, a
silent one and a healthy one, all on 127.0.0.1.
"""

import time

import orjson
import pytest
from django.utils import timezone

from dashboard.alerts import tasks
from dashboard.alerts.models import (
    FIRING,
    INACTIVE,
    Alert,
    DeliveryAttempt,
    Rule,
    Transition,
    WebhookEndpoint,
    fingerprint,
)

NOTIFICATIONS = 20
DEADLINE = 3.0  # seconds per attempt: each trickling attempt holds its thread this long
MARGIN = 2.0  # how much later than without the slow receiver a healthy notification may arrive

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def deliveries(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_TIMEOUT = DEADLINE
    settings.GPULSE_WEBHOOK_MAX_ATTEMPTS = 1  # one attempt each: the trickle's retries would only lengthen the test
    settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY = 2
    settings.GPULSE_ALERT_GROUP_WAIT = 0


def notified_transitions(count: int, prefix: str) -> list[Transition]:
    """Return ``count`` firing transitions of one rule, each on a node of its own (``prefix``-0, -1, …), so each
    is a notification of its own."""
    rule, _ = Rule.objects.get_or_create(name="hot", metric="gpu.temp", comparison=">", threshold=85)
    now = timezone.now()
    made = []
    for n in range(count):
        node = f"{prefix}-{n}"
        alert = Alert.objects.create(
            fingerprint=fingerprint(rule.id, node, 0), rule=rule, node=node, gpu=0, status=FIRING, status_since=now
        )
        made.append(Transition.objects.create(
            alert=alert, old=INACTIVE, new=FIRING, reason="temp > 85", value=90, created=now, notify=True
        ))
    return made


def arrival_times(receiver, count: int, timeout: float) -> dict[str, float]:
    """Wait for ``count`` requests; return the monotonic time each node's notification first arrived."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    with receiver.received:
        while len(seen) < count:
            for request in receiver.requests:
                seen.setdefault(orjson.loads(request["body"])["group"]["node"], time.monotonic())
            left = deadline - time.monotonic()
            assert left > 0, f"{len(seen)} of {count} notifications arrived within {timeout:g} s"
            receiver.received.wait(min(left, 0.05))
    return seen


def latencies(receiver, transitions: list[Transition]) -> list[float]:
    """Dispatch every transition at once; return each one's seconds until the receiver got it."""
    already = len(receiver.requests)
    started = time.monotonic()
    for transition in transitions:
        tasks.dispatch.delay(transition.id)
    arrived = arrival_times(receiver, already + len(transitions), timeout=60)
    return [arrived[t.alert.node] - started for t in transitions]


def wait_until_done(endpoint: WebhookEndpoint, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while DeliveryAttempt.objects.filter(endpoint=endpoint).count() < count:
        assert time.monotonic() < deadline, "the slow endpoint's deliveries did not end"
        time.sleep(0.1)


def test_a_trickling_receiver_does_not_delay_a_healthy_ones_notifications(
    webhook_worker, deliveries, receiver, misbehaving
):
    healthy = WebhookEndpoint.objects.create(name="healthy", url=receiver.url + "/hook")
    alone = latencies(receiver, notified_transitions(NOTIFICATIONS, "gpu-a"))

    trickle = misbehaving("trickle")
    slow = WebhookEndpoint.objects.create(name="slow", url=trickle.url)
    beside_slow = latencies(receiver, notified_transitions(NOTIFICATIONS, "gpu-b"))

    late = [(i, round(b - a, 2)) for i, (a, b) in enumerate(zip(alone, beside_slow, strict=True)) if b > a + MARGIN]
    assert not late, f"notifications (index, seconds late) beside the slow receiver: {late}"
    # It really was slow: its deliveries were still under way when the healthy ones were all in.
    assert DeliveryAttempt.objects.filter(endpoint=slow).count() < NOTIFICATIONS
    trickle.close()
    wait_until_done(slow, NOTIFICATIONS)
    assert DeliveryAttempt.objects.filter(endpoint=healthy, outcome="ok").count() == 2 * NOTIFICATIONS


def most_at_once(attempts: list[DeliveryAttempt]) -> int:
    """Return the most attempts that were in flight together (a row is written as its attempt ends)."""
    edges = []
    for attempt in attempts:
        ended = attempt.created.timestamp()
        edges += [(ended - attempt.duration_ms / 1000, 1), (ended, -1)]
    most = current = 0
    for _moment, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        most = max(most, current)
    return most


def test_at_most_the_cap_of_attempts_reach_one_receiver_at_once(webhook_worker, deliveries, misbehaving):
    slow = WebhookEndpoint.objects.create(name="silent", url=misbehaving("silent").url)
    for transition in notified_transitions(6, "gpu-c"):
        tasks.dispatch.delay(transition.id)
    wait_until_done(slow, 6, timeout=6 * DEADLINE + 20)
    attempts = list(DeliveryAttempt.objects.filter(endpoint=slow))
    assert all(a.error.startswith("timed out") for a in attempts)
    assert most_at_once(attempts) == 2

