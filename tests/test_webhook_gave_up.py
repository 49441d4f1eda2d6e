"""Misbehaving receivers through the real webhook worker: every attempt ends within its
deadline, and a delivery whose last allowed attempt fails temporarily is logged "gave up"."""

import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dashboard.alerts import tasks
from dashboard.alerts.models import DeliveryAttempt, WebhookEndpoint
from tests.test_webhook_isolation import notified_transitions
from tests.webhook_receivers import GIGABYTE

DEADLINE = 1.5  # seconds per attempt
SLACK = 0.5  # writing the row, on a loaded test machine
ATTEMPTS = 3

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def retries(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_TIMEOUT = DEADLINE
    settings.GPULSE_WEBHOOK_MAX_ATTEMPTS = ATTEMPTS
    settings.GPULSE_WEBHOOK_RETRY_BASE = 0.05
    settings.GPULSE_ALERT_GROUP_WAIT = 0


def delivered(url: str) -> list[DeliveryAttempt]:
    """Deliver one notification to ``url``; return its attempts once the last one is logged."""
    endpoint = WebhookEndpoint.objects.create(name="target", url=url)
    [transition] = notified_transitions(1, "gpu-x")
    tasks.dispatch.delay(transition.id)
    final = {DeliveryAttempt.OK, DeliveryAttempt.FAILED, DeliveryAttempt.GAVE_UP}
    deadline = time.monotonic() + ATTEMPTS * (DEADLINE + 5)
    while not DeliveryAttempt.objects.filter(endpoint=endpoint, outcome__in=final).exists():
        assert time.monotonic() < deadline, "the delivery did not end"
        time.sleep(0.1)
    return list(DeliveryAttempt.objects.filter(endpoint=endpoint).order_by("attempt"))


def assert_within_deadline(attempts: list[DeliveryAttempt]) -> None:
    assert all(a.duration_ms < (DEADLINE + SLACK) * 1000 for a in attempts), [a.duration_ms for a in attempts]


@pytest.mark.parametrize("behaviour", ["silent", "trickle"])
def test_a_receiver_that_never_finishes_answering_is_given_up_on_after_the_last_attempt(
    webhook_worker, retries, misbehaving, behaviour
):
    attempts = delivered(misbehaving(behaviour).url)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "retry"), (2, "retry"), (3, "gave_up")]
    assert all(a.error == f"timed out after {DEADLINE:g} s (127.0.0.1)" for a in attempts)
    assert_within_deadline(attempts)


def test_a_receiver_answering_500_is_given_up_on_after_the_last_attempt(webhook_worker, retries, receiver):
    receiver.answer(*[500] * ATTEMPTS)
    attempts = delivered(receiver.url + "/hook")
    assert [(a.attempt, a.status_code, a.outcome) for a in attempts] == [
        (1, 500, "retry"), (2, 500, "retry"), (3, 500, "gave_up")
    ]
    assert_within_deadline(attempts)
    assert len(receiver.requests) == ATTEMPTS


def test_a_gigabyte_answer_is_delivered_in_one_attempt_within_the_deadline(webhook_worker, retries, misbehaving):
    gigabyte = misbehaving("gigabyte")
    [attempt] = delivered(gigabyte.url)
    assert (attempt.status_code, attempt.outcome) == (200, "ok")
    assert_within_deadline([attempt])
    assert sum(gigabyte.sent) < GIGABYTE


def test_the_delivery_log_shows_gave_up(webhook_worker, retries, receiver):
    receiver.answer(*[503] * ATTEMPTS)
    delivered(receiver.url + "/hook")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password=None))
    page = admin.get("/alerts/webhooks/").content.decode()
    log = page.split('id="delivery-log"')[1]
    assert log.count('class="outcome-gave_up"') == 1 and "HTTP 503 gave up" in log
    assert log.count('class="outcome-retry"') == 2
