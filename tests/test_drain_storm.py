"""A flapping node must not storm Slurm or the pager: one drain per node while its drain holds, drain calls
limited per node and for the cluster, and a flapping alert held firing (keep_firing_for).

Real parts: the evaluator on the test database, the scheduler worker, scontrol and a one-node slurmctld
(tests/slurm_cluster.py); scontrol is reached through a wrapper that logs each call, so the test counts
the calls Slurm received.
"""

import os
import time
from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from dashboard.alerts import tasks as alert_tasks
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import FIRING, RESOLVED, Alert, Notification, Rule, Transition, WebhookEndpoint
from dashboard.scheduler import tasks
from dashboard.scheduler.models import DrainRecord
from gpulse.status import UP
from tests.slurm_cluster import NODE, _binary
from tests.test_alerts_evaluate import cluster, gpu, judged
from tests.test_slurm_drain import audit_actions, drain_on, record_state, wait_for  # noqa: F401  (drain_on: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scontrol_calls(settings, tmp_path, slurm_cluster):
    """Route gpulse's scontrol through a wrapper that logs its arguments; return a reader of the drain calls."""
    log = tmp_path / "scontrol-calls"
    wrapper = tmp_path / "scontrol"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec {_binary("scontrol")} "$@"\n')
    os.chmod(wrapper, 0o755)
    settings.GPULSE_SCONTROL = str(wrapper)

    def drains() -> list[str]:
        calls = log.read_text().splitlines() if log.exists() else []
        return [call for call in calls if call.startswith("update") and "State=DRAIN" in call]

    return drains


def xid_rule(**fields) -> Rule:
    Rule.objects.all().delete()
    return Rule.objects.create(**{"name": "Xid drains", "metric": "gpu.xid_severity", "comparison": ">=",
                                  "threshold": 2, "drain": True, **fields})


def eight_gpus(xid: bool):
    return cluster((NODE, UP, [gpu(i, xid=[79] if xid else []) for i in range(8)]))


def slurm_drained(slurm_cluster) -> bool:
    return "DRAIN" in slurm_cluster.show()["State"].split("+")


def test_one_xid_on_eight_gpus_drains_the_node_with_one_scontrol_call(
    drain_on, scontrol_calls, slurm_cluster, scheduler_worker  # noqa: F811 (the fixture)
):
    xid_rule()
    AlertEvaluator(enqueue=lambda ids: None).evaluate(eight_gpus(xid=True), now=time.time())
    assert Alert.objects.filter(status=FIRING).count() == 8
    wait_for(record_state, lambda s: s == ["drained"])
    time.sleep(1)  # room for any further drain task to run
    assert len(scontrol_calls()) == 1 and slurm_drained(slurm_cluster)
    assert audit_actions() == ["node.drain"]


def test_an_xid_flapping_every_5_s_for_a_minute_is_one_firing_one_page_and_one_drain(
    drain_on, scontrol_calls, slurm_cluster, scheduler_worker, receiver, settings  # noqa: F811 (the fixture)
):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    xid_rule(keep_firing_for=60)
    pager = WebhookEndpoint.objects.create(name="pager", url=receiver.url)
    sent: list[int] = []
    evaluator = AlertEvaluator(enqueue=sent.extend)
    start = time.time()
    for second in range(60):
        evaluator.evaluate(eight_gpus(xid=second % 5 == 0), now=start + second)
    wait_for(record_state, lambda s: s == ["drained"])
    assert Transition.objects.filter(new=RESOLVED).count() == 0
    assert Transition.objects.filter(new=FIRING, notify=True).count() == 8  # one per GPU, once
    # No webhook worker here: the test runs the tasks, as the worker would. The 8 alerts are one page.
    assert [alert_tasks.dispatch(transition_id) for transition_id in sent] == [1] * 8
    [group] = Notification.objects.all()
    assert alert_tasks.flush(group.id) == 1 and alert_tasks.deliver(group.id, pager.id) == "ok"
    [page] = receiver.wait_for(1)
    assert len(orjson.loads(page["body"])["alerts"]) == 8
    assert len(scontrol_calls()) == 1 and audit_actions() == ["node.drain"]

    # The last Xid came at second 55, so the condition has been false since second 56: once that is
    # keep_firing_for ago, each alert resolves, once, and the drain holds until resume_after.
    evaluator.evaluate(eight_gpus(xid=False), now=start + 56 + 59)
    assert Transition.objects.filter(new=RESOLVED).count() == 0
    evaluator.evaluate(eight_gpus(xid=False), now=start + 56 + 60)
    resolved = Transition.objects.filter(new=RESOLVED)
    assert resolved.count() == 8 and resolved.first().reason.endswith("back to normal for 60 s")
    assert slurm_drained(slurm_cluster) and record_state() == ["drained"]


def test_a_health_check_flapping_every_3_s_drains_its_node_once(
    drain_on, scontrol_calls, slurm_cluster, scheduler_worker  # noqa: F811 (the fixture)
):
    """The issue's storm: a node.health drain rule over a check flapping every 3 s re-drained the node every 6 s."""
    Rule.objects.all().delete()
    Rule.objects.create(name="failing drains", metric="node.health", comparison=">=", threshold=2, drain=True,
                        resume_after=600)
    state = cluster((NODE, UP, [gpu(0)]))
    failing = judged(state, (NODE, [{"check": "pcie_link", "gpu": 0, "status": "fail", "reason": "x8 of x16"}]))
    healthy = judged(state, (NODE, []))
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    start = time.time()
    for flap in range(8):  # 24 s of flapping, every 3 s
        evaluator.evaluate(state, now=start + 3 * flap, health=failing if flap % 2 == 0 else healthy)
        if flap == 0:
            wait_for(record_state, lambda s: s == ["drained"])
    time.sleep(1)
    assert Transition.objects.filter(new=FIRING).count() == 4  # no keep_firing_for on this rule: it flaps
    assert record_state() == ["drained"] and len(scontrol_calls()) == 1
    assert slurm_drained(slurm_cluster)


def test_a_node_resumed_and_failing_again_waits_out_the_per_node_interval(
    drain_on, scontrol_calls, slurm_cluster, scheduler_worker, settings  # noqa: F811 (the fixture)
):
    settings.GPULSE_DRAIN_NODE_INTERVAL = 600
    xid_rule(resume_after=1)
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    evaluator.evaluate(eight_gpus(xid=True), now=time.time())
    wait_for(record_state, lambda s: s == ["drained"])
    evaluator.evaluate(eight_gpus(xid=False), now=time.time())
    wait_for(record_state, lambda s: s == ["resumed"])
    evaluator.evaluate(eight_gpus(xid=True), now=time.time())
    wait_for(lambda: DrainRecord.objects.order_by("id").last().error, lambda e: e.startswith("waiting"))
    waiting = DrainRecord.objects.order_by("id").last()
    assert waiting.state == "pending" and waiting.attempts == 0
    assert "at most once every 10 min (GPULSE_DRAIN_NODE_INTERVAL)" in waiting.error
    assert len(scontrol_calls()) == 1 and not slurm_drained(slurm_cluster)
    assert audit_actions() == ["node.drain", "node.resume", "node.drain_waiting"]

    # Once the interval has passed, the same record drains the node.
    DrainRecord.objects.filter(state="resumed").update(drained_at=timezone.now() - timedelta(seconds=601))
    assert tasks.drain(waiting.pk) == "drained"
    assert len(scontrol_calls()) == 2 and slurm_drained(slurm_cluster)


def test_the_cluster_cap_holds_a_drain_until_the_hour_frees_a_slot(drain_on, scontrol_calls, slurm_cluster, settings):  # noqa: F811 (the fixture)
    settings.GPULSE_DRAIN_MAX_NODES_PER_HOUR = 2
    xid_rule()
    for other, minutes_ago in (("gpu-a", 50), ("gpu-b", 10)):
        DrainRecord.objects.create(node=other, rule_name="Xid drains", reason="gpulse: x", state="resumed",
                                   drained_at=timezone.now() - timedelta(minutes=minutes_ago))
    AlertEvaluator(enqueue=lambda ids: None).evaluate(eight_gpus(xid=True), now=time.time())
    record = DrainRecord.objects.get(node=NODE)
    assert tasks.drain(record.pk) == "waiting"  # no worker: the test runs the task, as the worker would
    record.refresh_from_db()
    assert record.state == "pending"
    assert "drained 2 other nodes in the last hour, its cap (GPULSE_DRAIN_MAX_NODES_PER_HOUR=2)" in record.error
    # The slot frees when gpu-a's drain is an hour old: in about 10 minutes.
    assert 595 <= float(record.error.split()[1]) <= 600
    assert scontrol_calls() == [] and not slurm_drained(slurm_cluster)
    assert tasks.drain(record.pk) == "waiting"
    assert audit_actions() == ["node.drain_waiting"]  # once, however often it looks again

    DrainRecord.objects.filter(node="gpu-a").update(drained_at=timezone.now() - timedelta(minutes=61))
    assert tasks.drain(record.pk) == "drained"
    assert len(scontrol_calls()) == 1 and slurm_drained(slurm_cluster)


def test_a_drain_rule_without_a_record_of_its_own_holds_the_resume_for_its_resume_after(drain_on):  # noqa: F811
    Rule.objects.all().delete()
    Rule.objects.create(name="A hot GPU", metric="gpu.temp", comparison=">", threshold=85, drain=True, resume_after=1)
    Rule.objects.create(name="Xid drains", metric="gpu.xid_severity", comparison=">=", threshold=2, drain=True,
                        resume_after=600)
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    now = time.time()
    evaluator.evaluate(cluster((NODE, UP, [gpu(0, temp=90, xid=[79])])), now=now)
    assert Alert.objects.filter(status=FIRING).count() == 2
    record = DrainRecord.objects.get()  # one for the node: the first rule's (by name)
    assert record.rule_name == "A hot GPU"
    DrainRecord.objects.filter(pk=record.pk).update(state="drained", drained_at=timezone.now())
    evaluator.evaluate(cluster((NODE, UP, [gpu(0)])), now=now + 1)
    assert Alert.objects.filter(status=RESOLVED).count() == 2
    record.refresh_from_db()
    due = tasks.resume_due(NODE, [record])
    assert due is not None and (due - timezone.now()).total_seconds() > 590
