"""Deliveries end to end: evaluate() → transition → real Celery worker (webhooks queue: dispatch, flush of the
node's group, deliver) → real receiver. Grouping itself: tests/test_webhook_grouping.py."""

import time

import orjson
import pytest

from dashboard.alerts import tasks
from dashboard.alerts.delivery import signature
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import DeliveryAttempt, Rule, Transition, WebhookEndpoint
from dashboard.celery_app import app
from tests.celery_workers import webhook_worker_running
from tests.test_alerts_evaluate import T0, hot

SECRET = "worker-test-secret"

# The worker thread uses its own database connection: tests must commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker):
    app.control.purge()
    with webhook_worker_running():
        yield


@pytest.fixture
def endpoint(receiver, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_RETRY_BASE = 0.02  # seconds: the real backoff, made tiny
    settings.GPULSE_ALERT_GROUP_WAIT = 0  # each test's alert is its node's only one: no need to wait for others
    return WebhookEndpoint.objects.create(name="ops", url=receiver.url + "/hook", secret=SECRET, format="gpulse")


def attempts(expected: int, timeout: float = 10.0) -> list[DeliveryAttempt]:
    """Wait until the worker has logged ``expected`` attempts; return them in order."""
    deadline = time.monotonic() + timeout
    while True:
        rows = list(DeliveryAttempt.objects.order_by("id"))
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def a_transition(severity="warning") -> Transition:
    """Fire a rule without a `for` duration; return the firing transition, not yet sent."""
    Rule.objects.all().delete()
    rule = Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=85, severity=severity)
    AlertEvaluator(enqueue=lambda ids: None).evaluate(hot(90), now=T0)
    return Transition.objects.get(alert__rule=rule)


def evaluate(evaluator, state, now):
    evaluator.evaluate(state, now=now)


def only_rule(**fields):
    Rule.objects.all().delete()
    Rule.objects.create(**fields)


def assert_signed(request):
    headers = request["headers"]
    assert headers["X-Gpulse-Signature"] == signature(SECRET, headers["X-Gpulse-Timestamp"], request["body"])


def test_a_receiver_answering_500_500_200_gets_three_attempts_with_one_event_id(worker, receiver, endpoint):
    receiver.answer(500, 500, 200)
    transition = a_transition()
    tasks.dispatch.delay(transition.id)
    requests = receiver.wait_for(3)
    group = Transition.objects.select_related("notification").get(id=transition.id).notification
    assert {r["headers"]["X-Gpulse-Event"] for r in requests} == {str(group.event_id)}
    for request in requests:
        assert_signed(request)
    logged = attempts(3)
    outcomes = [(a.attempt, a.status_code, a.outcome) for a in logged]
    assert outcomes == [(1, 500, "retry"), (2, 500, "retry"), (3, 200, "ok")]
    assert all(a.notification_id == group.id and a.endpoint_id == endpoint.id and a.alerts == 1 for a in logged)


def test_a_receiver_answering_400_gets_one_attempt(worker, receiver, endpoint):
    receiver.answer(400)
    tasks.dispatch.delay(a_transition().id)
    receiver.wait_for(1)
    time.sleep(0.5)  # room for a (wrong) retry to show up
    assert len(receiver.requests) == 1
    [logged] = attempts(1)
    assert (logged.status_code, logged.outcome) == (400, "failed")


def test_it_gives_up_after_the_maximum_attempts(worker, receiver, endpoint, settings):
    settings.GPULSE_WEBHOOK_MAX_ATTEMPTS = 3
    receiver.answer(503, 503, 503, 503)
    tasks.dispatch.delay(a_transition().id)
    receiver.wait_for(3)
    time.sleep(0.5)
    assert len(receiver.requests) == 3
    # The last allowed attempt failing temporarily is no "retry": none follows.
    assert [a.outcome for a in attempts(3)] == ["retry", "retry", "gave_up"]


def test_a_duplicated_dispatch_delivers_once(worker, receiver, endpoint):
    transition = a_transition()
    tasks.dispatch.delay(transition.id)
    tasks.dispatch.delay(transition.id)
    receiver.wait_for(1)
    time.sleep(0.5)
    assert len(receiver.requests) == 1


def test_severity_filter_and_disabled_endpoints_are_respected(worker, receiver, endpoint):
    WebhookEndpoint.objects.create(name="pager", url=receiver.url + "/pager", format="slack", min_severity="critical")
    WebhookEndpoint.objects.create(name="off", url=receiver.url + "/off", enabled=False)
    assert tasks.dispatch(a_transition(severity="warning").id) == 1  # its group's flush goes to the worker
    [request] = receiver.wait_for(1)
    time.sleep(0.5)
    assert request["path"] == "/hook" and len(receiver.requests) == 1


def test_a_hot_gpu_gives_exactly_one_firing_and_one_resolved_post(worker, receiver, endpoint):
    only_rule(name="GPU hot", metric="gpu.temp", comparison=">", threshold=85, for_seconds=5)
    ev = AlertEvaluator()
    for second in range(0, 5):
        evaluate(ev, hot(91), T0 + second)
    time.sleep(0.3)
    assert receiver.requests == []  # pending only
    evaluate(ev, hot(91), T0 + 5)  # within one tick of the `for` duration
    receiver.wait_for(1)
    for second in range(6, 10):
        evaluate(ev, hot(91), T0 + second)
    evaluate(ev, hot(60), T0 + 10)
    evaluate(ev, hot(60), T0 + 11)
    requests = receiver.wait_for(2)
    time.sleep(0.5)
    assert len(receiver.requests) == 2
    bodies = [orjson.loads(r["body"]) for r in requests]
    assert [b["status"] for b in bodies] == ["firing", "resolved"]
    assert bodies[0]["alerts"][0]["value"] == 91 and bodies[1]["alerts"][0]["value"] == 60
    assert requests[0]["headers"]["X-Gpulse-Event"] != requests[1]["headers"]["X-Gpulse-Event"]
    for request in requests:
        assert_signed(request)


def test_two_ingest_processes_on_one_database_notify_once(worker, receiver, endpoint):
    only_rule(name="GPU hot", metric="gpu.temp", comparison=">", threshold=85, for_seconds=2)
    first, second = AlertEvaluator(), AlertEvaluator()
    for now in (T0, T0 + 1, T0 + 2, T0 + 3):
        evaluate(first, hot(91), now)
        evaluate(second, hot(91), now + 0.1)
    receiver.wait_for(1)
    time.sleep(0.5)
    assert len(receiver.requests) == 1
