"""A busy endpoint's deliveries wait in its line without polling: the attempt that frees a slot calls the next.

The issue: a receiver kept busy made the webhook worker re-queue 11,478 times in 2 minutes (every delivery
finding the endpoint full looked again every 0.5–1 s). Real parts: the in-process webhook worker, Redis,
a real receiver that holds each request.
"""

import threading
import time

import pytest
from celery.signals import task_prerun

from dashboard.alerts import tasks
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.leases import endpoint_slot
from dashboard.alerts.models import DeliveryAttempt, Rule, Transition, WebhookEndpoint
from gpulse.keys import Keys
from gpulse.status import UP
from tests.test_alerts_evaluate import T0, cluster, gpu
from tests.test_webhook_delivery import flushed

pytestmark = pytest.mark.django_db(transaction=True)

HOLD = 0.5  # seconds the receiver takes over each request


@pytest.fixture
def busy_endpoint(receiver, settings, redis_client):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY = 1
    settings.GPULSE_ALERT_GROUP_WAIT = 0
    receiver.answer(*[200] * 20, delay=HOLD)
    return WebhookEndpoint.objects.create(name="pager", url=receiver.url)


@pytest.fixture
def deliver_runs():
    """Count the deliver tasks the worker runs."""
    runs = []
    lock = threading.Lock()

    def counted(sender=None, **kwargs):
        if sender is not None and sender.name == tasks.deliver.name:
            with lock:
                runs.append(kwargs.get("args"))

    task_prerun.connect(counted, weak=False)
    yield runs
    task_prerun.disconnect(counted)


def six_firings() -> list[int]:
    """Six firings on six nodes: six notifications, six deliveries."""
    Rule.objects.all().delete()
    Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=85)
    nodes = [(f"n{n}", UP, [gpu(0, temp=90)]) for n in range(6)]
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(*nodes), now=T0)
    return list(Transition.objects.values_list("id", flat=True))


def test_deliveries_to_a_busy_endpoint_wait_in_line_without_polling(webhook_worker, busy_endpoint, receiver,
                                                                    deliver_runs):
    for transition_id in six_firings():
        tasks.dispatch.delay(transition_id)
    assert len(receiver.wait_for(6, timeout=6 * HOLD + 10)) == 6
    deadline = time.monotonic() + 5
    while DeliveryAttempt.objects.filter(outcome="ok").count() < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert DeliveryAttempt.objects.filter(outcome="ok").count() == 6
    # Each delivery ran at most twice: once on flush, once when a freed slot called it. Polling every
    # 0.5-1 s for the ~3 s the line took to drain ran them about 20 times.
    assert len(deliver_runs) <= 2 * 6, deliver_runs


def test_a_delivery_behind_a_dead_workers_lease_is_sent_by_its_look_again(busy_endpoint, receiver, redis_client):
    """A slot freed by an expired lease calls nobody: the waiting delivery's own look again sends it."""
    [transition_id, *_] = six_firings()
    group_id = flushed(transition_id).id
    leases = Keys().webhook_leases(busy_endpoint.id)
    seconds, micros = redis_client.time()
    now_ms = seconds * 1000 + micros // 1000
    redis_client.zadd(leases, {"died-holding-it": now_ms + 60_000})
    assert tasks.deliver(group_id, busy_endpoint.id) == "busy"  # no worker: the test runs the task
    line = Keys().webhook_line(busy_endpoint.id)
    assert redis_client.zrange(line, 0, -1) == [tasks.waiter(group_id, 1).encode()]
    redis_client.zadd(leases, {"died-holding-it": now_ms - 1})  # its lease ran out
    assert tasks.look_again(group_id, busy_endpoint.id, 1) == "ok"
    assert len(receiver.wait_for(1)) == 1 and redis_client.zcard(line) == 0


def test_a_freed_slot_calls_the_first_in_line_and_its_look_again_then_does_nothing(busy_endpoint, redis_client):
    [transition_id, *_] = six_firings()
    group_id = flushed(transition_id).id
    called = []
    with endpoint_slot(busy_endpoint.id, call=called.append) as held:
        assert held
        assert tasks.deliver(group_id, busy_endpoint.id) == "busy"
    assert called == [tasks.waiter(group_id, 1)]
    assert redis_client.zcard(Keys().webhook_line(busy_endpoint.id)) == 0
    assert tasks.look_again(group_id, busy_endpoint.id, 1) == "called"
    assert not DeliveryAttempt.objects.exists()
