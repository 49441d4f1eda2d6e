"""Notifications grouped per node, as Alertmanager's group_by: [node] and group_wait: the alerts of one node that
notify within GPULSE_ALERT_GROUP_WAIT of the group's first go out as one delivery per endpoint.

Real parts: the evaluator, the in-process webhook worker on its queue, Redis, a real HTTP receiver.
"""

import threading
import time
from datetime import timedelta

import orjson
import pytest
from django.db import connection, transaction
from django.utils import timezone

from dashboard.alerts import tasks
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import DeliveryAttempt, Notification, Rule, Transition, WebhookEndpoint
from gpulse.status import UP
from tests.test_alerts_evaluate import T0, cluster, gpu

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 1.0  # seconds of group wait: the suite's, short


@pytest.fixture
def grouping(settings, receiver):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_RETRY_BASE = 0.02
    settings.GPULSE_ALERT_GROUP_WAIT = WAIT
    Rule.objects.all().delete()
    return WebhookEndpoint.objects.create(name="ops", url=receiver.url + "/ops")


def xid_rule(**fields) -> Rule:
    return Rule.objects.create(**{"name": "GPU Xid 79", "metric": "gpu.xid", "comparison": "==", "threshold": 79,
                                  "severity": "critical", **fields})


def xid_on(node: str, gpus) -> tuple:
    return (node, UP, [gpu(i, xid=[79]) for i in gpus])


def bodies(receiver, count: int, path: str | None = None) -> list[dict]:
    """Wait for ``count`` requests, then a while longer for a wrong extra one; return the bodies (of ``path``)."""
    receiver.wait_for(count)
    time.sleep(WAIT + 0.5)
    return [orjson.loads(r["body"]) for r in receiver.requests if path is None or r["path"] == path]


def test_xid_on_8_gpus_of_one_node_is_one_delivery_per_endpoint_carrying_every_alert(webhook_worker, grouping,
                                                                                       receiver):
    WebhookEndpoint.objects.create(name="am", url=receiver.url + "/am", format="alertmanager")
    xid_rule()
    AlertEvaluator().evaluate(cluster(xid_on("gpu-01", range(8))), now=T0)
    requests = receiver.wait_for(2)
    time.sleep(WAIT + 0.5)
    assert len(receiver.requests) == 2, [r["path"] for r in receiver.requests]
    by_path = {r["path"]: orjson.loads(r["body"]) for r in requests}
    native, am = by_path["/ops"], by_path["/am"]
    assert native["version"] == 2 and native["group"] == {"node": "gpu-01"} and native["status"] == "firing"
    assert sorted(a["gpu"] for a in native["alerts"]) == list(range(8))
    assert {a["rule"] for a in native["alerts"]} == {"GPU Xid 79"}
    assert am["groupKey"] == '{}:{node="gpu-01"}' and am["groupLabels"] == {"node": "gpu-01"}
    assert len(am["alerts"]) == 8
    assert am["commonLabels"] == {"alertname": "GPU Xid 79", "node": "gpu-01", "severity": "critical"}
    # One event, the same on both endpoints; each attempt says it carried 8 alerts.
    assert len({r["headers"]["X-Gpulse-Event"] for r in requests}) == 1
    notification = Notification.objects.get()
    assert str(notification.event_id) == native["event_id"] and notification.processed is not None
    assert [a.alerts for a in DeliveryAttempt.objects.all()] == [8, 8]
    assert set(Transition.objects.values_list("notification", flat=True)) == {notification.id}


def test_three_rules_firing_on_one_node_within_the_wait_are_one_delivery(webhook_worker, grouping, receiver):
    xid_rule()
    Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=85)
    Rule.objects.create(name="power", metric="gpu.power", comparison=">", threshold=250, severity="info")
    evaluator = AlertEvaluator()
    evaluator.evaluate(cluster(("gpu-01", UP, [gpu(0, temp=90)])), now=T0)
    evaluator.evaluate(cluster(("gpu-01", UP, [gpu(0, temp=90, xid=[79])])), now=T0 + 0.3)
    [body] = bodies(receiver, 1)
    assert sorted(a["rule"] for a in body["alerts"]) == ["GPU Xid 79", "hot", "power"]
    # The most urgent first.
    assert [a["severity"] for a in body["alerts"]] == ["critical", "warning", "info"]


def test_alerts_on_two_nodes_are_two_deliveries(webhook_worker, grouping, receiver):
    xid_rule()
    AlertEvaluator().evaluate(cluster(xid_on("gpu-01", [0, 1]), xid_on("gpu-02", [5])), now=T0)
    delivered = bodies(receiver, 2)
    assert len(delivered) == 2
    assert {b["group"]["node"]: sorted(a["gpu"] for a in b["alerts"]) for b in delivered} == {
        "gpu-01": [0, 1], "gpu-02": [5]}
    assert all(a["node"] == b["group"]["node"] for b in delivered for a in b["alerts"])


def test_an_alert_after_its_nodes_group_was_sent_starts_a_new_group(webhook_worker, grouping, receiver):
    xid_rule()
    evaluator = AlertEvaluator()
    evaluator.evaluate(cluster(xid_on("gpu-01", [0])), now=T0)
    [first] = bodies(receiver, 1)
    evaluator.evaluate(cluster(xid_on("gpu-01", [0, 1])), now=T0 + 10)
    first_again, second = bodies(receiver, 2)
    assert first_again == first
    assert [a["gpu"] for a in second["alerts"]] == [1] and second["event_id"] != first["event_id"]
    assert Notification.objects.count() == 2


def test_a_firing_and_a_resolution_share_a_group_that_is_firing(webhook_worker, grouping, receiver):
    xid_rule()
    evaluator = AlertEvaluator()
    evaluator.evaluate(cluster(xid_on("gpu-01", [0])), now=T0)
    bodies(receiver, 1)
    evaluator.evaluate(cluster(("gpu-01", UP, [gpu(0), gpu(1, xid=[79])])), now=T0 + 10)
    _, body = bodies(receiver, 2)
    assert (body["status"], body["kind"]) == ("firing", "firing")
    assert sorted((a["gpu"], a["status"]) for a in body["alerts"]) == [(0, "resolved"), (1, "firing")]


def test_a_redelivered_dispatch_or_flush_sends_nothing_twice(webhook_worker, grouping, receiver):
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(xid_on("gpu-01", range(3))), now=T0)
    transitions = list(Transition.objects.values_list("id", flat=True))
    for transition_id in transitions + transitions:
        tasks.dispatch.delay(transition_id)
    [body] = bodies(receiver, 1)
    assert len(body["alerts"]) == 3
    notification = Notification.objects.get()
    tasks.flush.delay(notification.id)
    assert [tasks.dispatch(t) for t in transitions] == [0, 0, 0]  # as the worker runs a message pushed again
    assert tasks.flush(notification.id) == 0
    time.sleep(WAIT + 0.5)
    assert len(receiver.requests) == 1 and DeliveryAttempt.objects.count() == 1


def lost_flush(node: str, transition_id: int) -> Notification:
    """Leave a group as a worker that died after opening it, before queuing its flush, leaves it."""
    long_ago = timezone.now() - timedelta(minutes=5)
    group = Notification.objects.create(node=node, created=long_ago, updated=long_ago)
    Transition.objects.filter(id=transition_id).update(processed=long_ago, notification=group)
    return group


def test_a_group_whose_flush_was_lost_is_sent_when_its_dispatch_comes_again(webhook_worker, grouping, receiver):
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(xid_on("gpu-01", [0])), now=T0)
    [transition] = Transition.objects.values_list("id", flat=True)
    group = lost_flush("gpu-01", transition)
    tasks.dispatch.delay(transition)  # the broker hands the unacknowledged message out again
    [body] = bodies(receiver, 1)
    assert body["event_id"] == str(group.event_id) and [a["gpu"] for a in body["alerts"]] == [0]


def test_a_group_whose_flush_was_lost_is_sent_when_the_next_alert_joins_it(webhook_worker, grouping, receiver):
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(xid_on("gpu-01", [0, 1])), now=T0)
    first, second = Transition.objects.order_by("alert__gpu").values_list("id", flat=True)
    lost_flush("gpu-01", first)
    tasks.dispatch.delay(second)
    [body] = bodies(receiver, 1)
    assert sorted(a["gpu"] for a in body["alerts"]) == [0, 1]


def test_an_endpoint_wanting_only_critical_gets_only_the_critical_alerts_of_a_group(webhook_worker, grouping,
                                                                                     receiver):
    WebhookEndpoint.objects.create(name="pager", url=receiver.url + "/pager", min_severity="critical")
    xid_rule()
    Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=85, severity="warning")
    AlertEvaluator().evaluate(cluster(("gpu-01", UP, [gpu(0, temp=90, xid=[79])]), ("gpu-02", UP, [gpu(0, temp=90)])),
                              now=T0)
    bodies(receiver, 3)
    assert len(receiver.requests) == 3  # ops: both nodes; pager: gpu-01 only, gpu-02 has nothing critical
    [pager] = bodies(receiver, 3, "/pager")
    assert pager["group"]["node"] == "gpu-01" and [a["rule"] for a in pager["alerts"]] == ["GPU Xid 79"]
    ops = {b["group"]["node"]: sorted(a["rule"] for a in b["alerts"]) for b in bodies(receiver, 2, "/ops")}
    assert ops == {"gpu-01": ["GPU Xid 79", "hot"], "gpu-02": ["hot"]}
    by_endpoint = {(a.endpoint.name, a.alerts) for a in DeliveryAttempt.objects.select_related("endpoint")}
    assert by_endpoint == {("ops", 2), ("ops", 1), ("pager", 1)}


def test_dispatches_racing_a_flush_leave_no_alert_out_and_send_none_twice(webhook_worker, grouping, receiver,
                                                                          settings):
    """Many dispatches at once, for one node, while its group is flushed at once (no wait): every alert goes out
    exactly once, whichever group it joined."""
    settings.GPULSE_ALERT_GROUP_WAIT = 0
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(xid_on("gpu-01", range(8))), now=T0)
    transitions = list(Transition.objects.values_list("id", flat=True))
    start = threading.Barrier(len(transitions))
    joined = []

    def dispatch(transition_id):
        start.wait()
        try:
            joined.append(tasks.dispatch(transition_id))
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=dispatch, args=(t,)) for t in transitions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert joined == [1] * len(transitions)
    deadline = time.monotonic() + 10
    while Notification.objects.filter(processed=None).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    groups = Notification.objects.count()
    delivered = bodies(receiver, groups)
    assert len(delivered) == groups
    sent = sorted(a["gpu"] for b in delivered for a in b["alerts"])
    assert sent == list(range(8))
    assert not Transition.objects.filter(notification=None).exists()


def test_a_join_waiting_on_a_flush_that_claims_the_group_opens_a_new_group(webhook_worker, grouping):
    """The flush's claim holds the group's row when a dispatch finds the group open: the dispatch waits for it
    (PostgreSQL's row lock, SQLite's one writer), sees the group is no longer open and opens another,
    rather than join a group already sent."""
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(xid_on("gpu-01", [0, 1])), now=T0)
    first, second = Transition.objects.order_by("alert__gpu").values_list("id", flat=True)
    now = timezone.now()
    group = Notification.objects.create(node="gpu-01", created=now, updated=now)
    Transition.objects.filter(id=first).update(processed=now, notification=group)
    locked, dispatched = threading.Event(), threading.Event()

    def flush_claim():
        try:
            with transaction.atomic():
                Notification.objects.select_for_update().get(id=group.id)
                locked.set()
                dispatched.wait(1.0)  # the dispatch is under way meanwhile, waiting for this transaction
                Notification.objects.filter(id=group.id, processed=None).update(processed=timezone.now())
        finally:
            connection.close()

    claimer = threading.Thread(target=flush_claim)
    claimer.start()
    assert locked.wait(10)
    waiter = threading.Thread(target=lambda: (tasks.dispatch(second), connection.close(), dispatched.set()))
    waiter.start()
    claimer.join()
    waiter.join()
    assert dispatched.is_set()
    assert list(group.transitions.values_list("id", flat=True)) == [first]
    assert Transition.objects.get(id=second).notification_id not in (None, group.id)
