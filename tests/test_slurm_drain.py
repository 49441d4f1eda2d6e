"""Drain rules end to end: evaluate() → drain record → real Celery scheduler worker → real scontrol → real slurmctld."""

import os
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections
from django.db.models.signals import pre_save
from django.utils import timezone

from dashboard.accounts.models import AuditEvent
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import Alert, Rule
from dashboard.scheduler import hooks, sweeper, tasks
from dashboard.scheduler.models import DrainRecord
from gpulse.celery_contract import SCHEDULER_QUEUE
from tests.celery_workers import database_url_of_tests, spawn_worker, stop_workers, wait_ready
from tests.slurm_cluster import NODE
from tests.test_alerts_evaluate import hot

# The worker threads use their own database connections: tests must commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def drain_on(settings):
    settings.GPULSE_SLURM_DRAIN = True
    settings.GPULSE_DRAIN_RETRY_BASE = 0.05  # seconds: the real backoff, made tiny
    settings.GPULSE_SCONTROL_TIMEOUT = 3.0


@pytest.fixture
def drain_rule(db):
    Rule.objects.all().delete()
    return Rule.objects.create(
        name="too hot", metric="gpu.temp", comparison=">", threshold=85, drain=True, resume_after=2
    )


def wait_for(read, until, timeout: float = 20.0):
    """Return read() once until(value) holds; fail with the last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if until(value) or time.monotonic() > deadline:
            assert until(value), f"still {value!r} after {timeout} s"
            return value
        time.sleep(0.05)


def record_state():
    return list(DrainRecord.objects.order_by("id").values_list("state", flat=True))


def audit_actions():
    return list(AuditEvent.objects.filter(target=NODE).order_by("id").values_list("action", flat=True))


def fire(evaluator):
    evaluator.evaluate(hot(90, node=NODE), now=time.time())


def resolve(evaluator):
    evaluator.evaluate(hot(60, node=NODE), now=time.time())


def test_a_firing_drain_rule_drains_the_node_and_resumes_it_after_resume_after(
    drain_on, drain_rule, slurm_cluster, scheduler_worker
):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    node = slurm_cluster.show()
    assert "DRAIN" in node["State"].split("+")
    assert node["Reason"].startswith("gpulse: too hot on GPU 1: gpu.temp > 85 (now 90)")
    record = DrainRecord.objects.get()
    assert (record.node, record.rule_id, record.attempts) == (NODE, drain_rule.id, 1)
    assert record.drained_at is not None and record.resumed_at is None

    resolve(evaluator)
    time.sleep(0.5)
    assert record_state() == ["drained"], "resumed before resume_after"
    assert "DRAIN" in slurm_cluster.show()["State"].split("+")
    wait_for(record_state, lambda s: s == ["resumed"])
    assert "DRAIN" not in slurm_cluster.show()["State"].split("+")
    assert audit_actions() == ["node.drain", "node.resume"]
    drained, resumed = AuditEvent.objects.filter(target=NODE).order_by("id")
    assert drained.detail["rule"] == "too hot" and drained.detail["reason"].startswith("gpulse: too hot")
    assert (drained.username, drained.user, resumed.username) == ("gpulse", None, "gpulse")
    assert resumed.detail["record"] == record.pk


def test_a_node_drained_by_a_person_is_neither_re_reasoned_nor_resumed(
    drain_on, drain_rule, slurm_cluster, scheduler_worker
):
    slurm_cluster.drain_as_person("maintenance")
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["skipped_by_person"])
    assert "maintenance" in DrainRecord.objects.get().error
    resolve(evaluator)
    time.sleep(drain_rule.resume_after + 1.5)
    node = slurm_cluster.show()
    assert "DRAIN" in node["State"].split("+")
    assert node["Reason"].startswith("maintenance")
    assert record_state() == ["skipped_by_person"]
    assert audit_actions() == ["node.drain_skipped"]


def test_a_node_a_person_drained_again_after_gpulse_is_not_resumed(
    drain_on, drain_rule, slurm_cluster, scheduler_worker
):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    slurm_cluster.drain_as_person("maintenance: swap GPU 1")
    resolve(evaluator)
    wait_for(record_state, lambda s: s == ["skipped_by_person"])
    node = slurm_cluster.show()
    assert "DRAIN" in node["State"].split("+") and node["Reason"].startswith("maintenance: swap GPU 1")
    assert "a person drained it again" in DrainRecord.objects.get().error
    assert audit_actions() == ["node.drain", "node.resume_skipped"]


def test_a_node_a_person_resumed_by_hand_is_left_alone(drain_on, drain_rule, slurm_cluster, scheduler_worker):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    assert slurm_cluster.scontrol("update", f"NodeName={NODE}", "State=RESUME").returncode == 0
    resolve(evaluator)
    wait_for(record_state, lambda s: s == ["skipped_by_person"])
    assert "a person already resumed it" in DrainRecord.objects.get().error
    assert audit_actions() == ["node.drain", "node.resume_skipped"]


def test_a_drain_rule_firing_again_before_resume_after_keeps_the_node_drained(
    drain_on, drain_rule, slurm_cluster, scheduler_worker
):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    resolve(evaluator)
    fire(evaluator)  # the node's drain holds: no second record, no second scontrol call
    time.sleep(drain_rule.resume_after + 1.5)
    assert "DRAIN" in slurm_cluster.show()["State"].split("+")
    assert record_state() == ["drained"]
    resolve(evaluator)
    wait_for(record_state, lambda s: s == ["resumed"])
    assert "DRAIN" not in slurm_cluster.show()["State"].split("+")
    assert audit_actions() == ["node.drain", "node.resume"]


def test_a_stopped_slurmctld_records_a_failure_after_the_retries_and_evaluation_goes_on(
    drain_on, drain_rule, slurm_cluster, scheduler_worker, settings
):
    settings.GPULSE_DRAIN_MAX_ATTEMPTS = 2
    slurm_cluster.stop_controller()
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["failed"], timeout=30)
    record = DrainRecord.objects.get()
    assert record.attempts == 2
    assert record.error.startswith("not drained after 2 attempt(s): scontrol show node")
    assert "got no answer within 3 s: is slurmctld up and reachable?" in record.error
    resolve(evaluator)
    assert evaluator.status()["ok"]
    assert audit_actions() == ["node.drain_failed"]
    assert AuditEvent.objects.get(action="node.drain_failed").detail["error"] == record.error


def test_a_bad_slurm_conf_records_a_failure_a_person_understands(
    drain_on, drain_rule, slurm_cluster, scheduler_worker, settings, monkeypatch
):
    settings.GPULSE_DRAIN_MAX_ATTEMPTS = 1
    settings.GPULSE_SCONTROL_TIMEOUT = 1.0
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    fire(AlertEvaluator(enqueue=lambda ids: None))
    wait_for(record_state, lambda s: s == ["failed"])
    assert "got no answer within 1 s" in DrainRecord.objects.get().error
    assert "DRAIN" not in slurm_cluster.show()["State"].split("+")


def test_a_missing_scontrol_is_named_in_the_failure(drain_on, drain_rule, scheduler_worker, settings):
    settings.GPULSE_SCONTROL = "/nonexistent/scontrol"
    settings.GPULSE_DRAIN_MAX_ATTEMPTS = 1
    fire(AlertEvaluator(enqueue=lambda ids: None))
    wait_for(record_state, lambda s: s == ["failed"])
    assert DrainRecord.objects.get().error == (
        "not drained after 1 attempt(s): scontrol not found at '/nonexistent/scontrol': "
        "install slurm-client or set GPULSE_SCONTROL"
    )


def test_a_resume_failure_is_retried_then_recorded_and_the_node_stays_drained(
    drain_on, drain_rule, slurm_cluster, scheduler_worker, settings
):
    settings.GPULSE_DRAIN_MAX_ATTEMPTS = 2
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    slurm_cluster.stop_controller()
    resolve(evaluator)
    wait_for(record_state, lambda s: s == ["failed"], timeout=40)
    error = DrainRecord.objects.get().error
    assert error.startswith("not resumed after 2 attempt(s)")
    assert error.endswith(f"scontrol update NodeName={NODE} State=RESUME")
    assert audit_actions() == ["node.drain", "node.resume_failed"]


def test_a_retried_drain_task_drains_once(drain_on, drain_rule, slurm_cluster):
    fire(AlertEvaluator(enqueue=lambda ids: None))  # no worker: the test runs the task itself
    record = DrainRecord.objects.get()
    assert tasks.drain(record.pk) == "drained"
    assert tasks.drain(record.pk) == "not pending"
    assert audit_actions() == ["node.drain"]
    assert DrainRecord.objects.get().attempts == 1


def test_a_drain_task_for_an_alert_already_resolved_drains_nothing(drain_on, drain_rule, slurm_cluster):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    resolve(evaluator)
    record = DrainRecord.objects.get()
    assert tasks.drain(record.pk) == "cancelled"
    assert "DRAIN" not in slurm_cluster.show()["State"].split("+")
    assert audit_actions() == []


def test_without_gpulse_slurm_drain_a_drain_rule_only_alerts(drain_rule, settings):
    settings.GPULSE_SLURM_DRAIN = False
    fire(AlertEvaluator(enqueue=lambda ids: None))
    assert not DrainRecord.objects.exists()


def test_a_rule_without_drain_never_drains(drain_on, drain_rule):
    Rule.objects.filter(pk=drain_rule.pk).update(drain=False)
    fire(AlertEvaluator(enqueue=lambda ids: None))
    assert not DrainRecord.objects.exists()


def test_the_sweeper_queues_a_drain_whose_message_was_lost(
    drain_on, drain_rule, slurm_cluster, scheduler_worker, monkeypatch
):
    # The drain message, lost: the broker was away when the alert fired.
    monkeypatch.setattr(hooks, "enqueue", lambda drain_ids, resumes: None)
    fire(AlertEvaluator(enqueue=lambda ids: None))
    assert record_state() == ["pending"]
    assert sweeper.sweep() == (0, 0)  # not idle long enough: a retry may still be coming
    DrainRecord.objects.update(updated=timezone.now() - sweeper.idle_after() - timedelta(seconds=1))
    assert sweeper.sweep() == (1, 0)
    wait_for(record_state, lambda s: s == ["drained"])
    assert "DRAIN" in slurm_cluster.show()["State"].split("+")


def test_the_sweeper_resumes_a_node_whose_resume_look_was_lost(
    drain_on, drain_rule, slurm_cluster, scheduler_worker, monkeypatch
):
    evaluator = AlertEvaluator(enqueue=lambda ids: None)
    fire(evaluator)
    wait_for(record_state, lambda s: s == ["drained"])
    monkeypatch.setattr(hooks, "enqueue", lambda drain_ids, resumes: None)  # the resume look, lost
    resolve(evaluator)
    time.sleep(drain_rule.resume_after + 1)
    assert record_state() == ["drained"]
    long_ago = timezone.now() - sweeper.idle_after() - timedelta(seconds=1)
    DrainRecord.objects.update(updated=long_ago, drained_at=long_ago)
    Alert.objects.update(resolved_at=long_ago)
    assert sweeper.sweep() == (0, 1)
    wait_for(record_state, lambda s: s == ["resumed"])
    assert "DRAIN" not in slurm_cluster.show()["State"].split("+")


def test_the_scheduler_worker_process_runs_the_sweeper(drain_on, redis_client, tmp_path):
    log = tmp_path / "scheduler.log"
    process = spawn_worker(
        ["dashboard.control_worker", "worker", "-Q", SCHEDULER_QUEUE, "-n", "scheduler@test", "--pool", "threads"],
        log, {"REDIS_URL": os.environ["REDIS_URL"], "DATABASE_URL": database_url_of_tests(),
              "GPULSE_SLURM_DRAIN": "true"},
    )
    try:
        wait_ready(process, log, time.monotonic() + 60)
        wait_for(log.read_text, lambda text: "drain sweeper and planned-drain pass started" in text, timeout=10)
    finally:
        stop_workers([process])


def test_an_outcome_and_its_audit_row_are_committed_together(drain_on, drain_rule, slurm_cluster, settings):
    """Another connection never sees a record's new state without its audit row (nor the reverse)."""
    seen_as_each_audit_row_is_written = []

    def read_from_another_connection(sender, instance, **kwargs):
        def read():
            try:
                seen_as_each_audit_row_is_written.append((instance.action, record_state(), audit_actions()))
            finally:
                connections.close_all()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join()

    pre_save.connect(read_from_another_connection, sender=AuditEvent, weak=False)
    try:
        evaluator = AlertEvaluator(enqueue=lambda ids: None)
        fire(evaluator)  # no worker: the test runs the tasks itself
        assert tasks.drain(DrainRecord.objects.get().pk) == "drained"
        resolve(evaluator)
        long_ago = timezone.now() - timedelta(seconds=drain_rule.resume_after + 1)
        DrainRecord.objects.update(drained_at=long_ago)
        Alert.objects.update(resolved_at=long_ago)
        settings.GPULSE_SCONTROL = "/nonexistent/scontrol"
        settings.GPULSE_DRAIN_MAX_ATTEMPTS = 1
        assert tasks.resume(NODE) == "failed"
    finally:
        pre_save.disconnect(read_from_another_connection, sender=AuditEvent)
    assert seen_as_each_audit_row_is_written == [
        ("node.drain", ["pending"], []),
        ("node.resume_failed", ["drained"], ["node.drain"]),
    ]
    assert (record_state(), audit_actions()) == (["failed"], ["node.drain", "node.resume_failed"])
