"""A benchmark launched while webhook deliveries trickle starts at once.

The webhook worker runs as its own process on its own queue, the control
worker beside it, node workers running real gloo ranks: as production runs
them. Before deliveries had a queue of their own, receivers that trickled
held every control thread and a launch stayed queued for minutes.
"""

import time

import pytest

from dashboard.alerts import tasks
from dashboard.alerts.models import DeliveryAttempt, WebhookEndpoint
from tests.celery_workers import webhook_worker_process
from tests.test_benchmark_jobs import SMALL, post, wait_for
from tests.test_webhook_isolation import NOTIFICATIONS, notified_transitions, wait_until_done

LAUNCH_WITHIN = 5.0  # seconds from the launch until the job is claimed (running)
DEADLINE = 3.0  # seconds per webhook attempt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def webhook_worker(tmp_path, redis_client):
    settings_env = {
        "GPULSE_WEBHOOK_ALLOW_PRIVATE": "true",
        "GPULSE_WEBHOOK_TIMEOUT": str(DEADLINE),
        "GPULSE_WEBHOOK_MAX_ATTEMPTS": "1",
        "GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY": "2",
        "GPULSE_ALERT_GROUP_WAIT": "0",
    }
    with webhook_worker_process(tmp_path, settings_env):
        yield


def test_a_benchmark_launched_beside_a_trickling_receiver_starts_within_5_s(
    webhook_worker, misbehaving, client, operator_user, live_nodes, node_workers, control_worker
):
    node_workers.start(*live_nodes)
    trickle = misbehaving("trickle")
    slow = WebhookEndpoint.objects.create(name="slow", url=trickle.url)
    for transition in notified_transitions(NOTIFICATIONS, "gpu-d"):
        tasks.dispatch.delay(transition.id)
    time.sleep(1.0)  # the deliveries are under way, the slow ones holding their threads
    client.force_login(operator_user)
    launched = time.monotonic()
    response = post(client, nodes=live_nodes, ranks_per_node=1, **SMALL)
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    wait_for(job_id, {"running", "succeeded", "failed", "timed_out"}, timeout=LAUNCH_WITHIN)
    assert time.monotonic() - launched < LAUNCH_WITHIN
    assert DeliveryAttempt.objects.filter(endpoint=slow).count() < NOTIFICATIONS  # still trickling meanwhile
    assert wait_for(job_id, {"succeeded", "failed", "timed_out"}, timeout=90).status == "succeeded"
    trickle.close()
    wait_until_done(slow, NOTIFICATIONS)
