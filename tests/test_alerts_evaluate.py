"""Alert evaluation with a controlled clock: every time step is an explicit `now`."""

from datetime import UTC

import orjson
import pytest

from dashboard.alerts import delivery
from dashboard.alerts.conditions import CompiledRule
from dashboard.alerts.evaluate import AlertEvaluator, firing_count
from dashboard.alerts.formats import FORMATS, Event
from dashboard.alerts.models import (
    FIRING,
    INACTIVE,
    PENDING,
    RESOLVED,
    Alert,
    Rule,
    Silence,
    Transition,
    WebhookEndpoint,
)
from dashboard.health.node_health import NodeHealthBook
from dashboard.live.state import ClusterState, NodeState
from gpulse.health import CHECK_IDS, action
from gpulse.status import DOWN, STALE, UP

T0 = 1_764_000_000.0

pytestmark = pytest.mark.django_db


def gpu(index, temp=60, **extra):
    reading = {
        "index": index,
        "util": 50,
        "mem_used": 40e9,
        "mem_total": 80e9,
        "temp": temp,
        "power": 300.0,
        "throttle": [],
        "ecc_uncorrected": 0,
        "xid": [],
    }
    reading.update(extra)
    return reading


def cluster(*nodes) -> ClusterState:
    """Build a ClusterState from (name, status, [gpu dicts]) tuples."""
    state = ClusterState()
    for name, status, gpus in nodes:
        sample = {"v": 1, "node": name, "ts": T0, "interval": 1.0, "gpus": gpus}
        state.nodes[name] = NodeState(name=name, sample=sample, arrived=T0, placed=T0, status=status)
    return state


def hot(temp, status=UP, node="gpu-01"):
    return cluster((node, status, [gpu(0), gpu(1, temp=temp)]))


@pytest.fixture
def rules():
    """Replace the default rules with the ones a test creates."""
    Rule.objects.all().delete()

    def make(**fields):
        defaults = dict(
            name=f"rule {Rule.objects.count()}", metric="gpu.temp", comparison=">", threshold=85, for_seconds=5
        )
        return Rule.objects.create(**{**defaults, **fields})

    return make


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    """Evaluate at `now` and return the ids queued for notification, as ingest would send them."""

    def step(evaluator, state, now, **kwargs):
        queued = []
        evaluator._enqueue = queued.extend
        with django_capture_on_commit_callbacks(execute=True):
            evaluator.evaluate(state, now=now, **kwargs)
        return [Transition.objects.get(id=i).kind for i in queued]

    return step


def alert_status(rule, node="gpu-01", gpu=1):
    row = Alert.objects.filter(rule=rule, node=node, gpu=gpu).first()
    return row.status if row else INACTIVE


def test_it_goes_pending_then_fires_when_the_for_duration_has_passed(rules, run):
    rule = rules(for_seconds=5)
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == []
    assert alert_status(rule) == PENDING
    assert run(ev, hot(90), T0 + 4.9) == []
    assert alert_status(rule) == PENDING
    assert run(ev, hot(90), T0 + 5) == ["firing"]
    assert alert_status(rule) == FIRING
    assert run(ev, hot(90), T0 + 6) == []
    assert ev.firing_targets() == {("gpu-01", 1)}
    assert firing_count() == 1
    assert list(Transition.objects.order_by("id").values_list("old", "new")) == [(INACTIVE, PENDING), (PENDING, FIRING)]


def test_one_false_evaluation_during_pending_resets_it(rules, run):
    rule = rules(for_seconds=5)
    ev = AlertEvaluator()
    run(ev, hot(90), T0)
    run(ev, hot(90), T0 + 3)
    run(ev, hot(80), T0 + 4)
    assert alert_status(rule) == INACTIVE
    run(ev, hot(90), T0 + 5)
    # The clock started again at T0 + 5, so T0 + 9 is too early.
    assert run(ev, hot(90), T0 + 9) == []
    assert run(ev, hot(90), T0 + 10) == ["firing"]


def test_it_resolves_and_notifies_the_resolution(rules, run):
    rule = rules(for_seconds=0)
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == ["firing"]
    assert run(ev, hot(70), T0 + 30) == ["resolved"]
    assert alert_status(rule) == RESOLVED
    resolved = Transition.objects.get(new=RESOLVED)
    assert resolved.duration.total_seconds() == 30
    assert ev.firing_targets() == set()
    assert run(ev, hot(70), T0 + 31) == []


def test_it_repeats_while_firing_every_repeat_interval(rules, run):
    rules(for_seconds=0, repeat_interval=3600)
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == ["firing"]
    assert run(ev, hot(90), T0 + 3599) == []
    assert run(ev, hot(90), T0 + 3600) == ["repeat"]
    assert run(ev, hot(90), T0 + 3601) == []
    assert run(ev, hot(90), T0 + 7200) == ["repeat"]


def test_a_silence_mutes_notifications_but_the_alert_is_still_tracked(rules, run):
    from datetime import datetime

    rule = rules(for_seconds=0)
    Silence.objects.create(rule=rule, node_glob="gpu-0*", until=datetime.fromtimestamp(T0 + 100, tz=UTC))
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == []
    assert alert_status(rule) == FIRING
    assert ev.firing_targets() == {("gpu-01", 1)}
    # The firing was never sent, so neither is its resolution.
    assert run(ev, hot(70), T0 + 10) == []
    assert alert_status(rule) == RESOLVED


def test_an_alert_still_firing_when_its_silence_ends_is_notified_then(rules, run):
    from datetime import datetime

    rule = rules(for_seconds=0)
    Silence.objects.create(node_glob="gpu-01", gpu=1, until=datetime.fromtimestamp(T0 + 100, tz=UTC))
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == []
    assert run(ev, hot(90), T0 + 99) == []
    assert run(ev, hot(90), T0 + 101) == ["repeat"]
    assert Transition.objects.filter(notify=True).get().reason.endswith("no longer silenced or inhibited")
    assert run(ev, hot(70), T0 + 102) == ["resolved"]
    assert alert_status(rule) == RESOLVED


def test_a_silence_on_another_gpu_does_not_mute(rules, run):
    from datetime import datetime

    rules(for_seconds=0)
    Silence.objects.create(node_glob="gpu-01", gpu=0, until=datetime.fromtimestamp(T0 + 100, tz=UTC))
    assert run(AlertEvaluator(), hot(90), T0) == ["firing"]


def test_a_down_node_keeps_its_gpu_alerts_and_node_down_takes_over(rules, run):
    temp = rules(for_seconds=0)
    down = rules(metric="node.down", comparison="==", threshold=1, for_seconds=60)
    ev = AlertEvaluator()
    assert run(ev, hot(90), T0) == ["firing"]
    # The node's data vanishes: its last (hot) sample stays, status says down.
    assert run(ev, hot(70, status=DOWN), T0 + 5) == []
    assert alert_status(temp) == FIRING
    assert alert_status(down, gpu=None) == PENDING
    assert run(ev, hot(70, status=DOWN), T0 + 64) == []
    assert run(ev, hot(70, status=DOWN), T0 + 65) == ["firing"]
    assert ev.firing_targets() == {("gpu-01", 1), ("gpu-01", None)}
    # Back up and cool: both resolve.
    assert sorted(run(ev, hot(70), T0 + 70)) == ["resolved", "resolved"]


def test_a_stale_node_freezes_gpu_alerts_but_node_stale_fires(rules, run):
    temp = rules(for_seconds=5)
    stale = rules(metric="node.stale", comparison="==", threshold=1, for_seconds=0)
    ev = AlertEvaluator()
    run(ev, hot(90), T0)
    assert run(ev, hot(90, status=STALE), T0 + 10) == ["firing"]
    assert alert_status(temp) == PENDING
    assert alert_status(stale, gpu=None) == FIRING


def test_a_missing_reading_keeps_the_state(rules, run):
    rule = rules(for_seconds=0)
    ev = AlertEvaluator()
    run(ev, hot(90), T0)
    lost = cluster(("gpu-01", UP, [gpu(0), gpu(1, temp=None, lost=True)]))
    assert run(ev, lost, T0 + 1) == []
    assert alert_status(rule) == FIRING


def test_scope_selects_nodes_by_glob_and_gpu_by_index(rules, run):
    rules(for_seconds=0, node_glob="rack1-*", gpu_index=1)
    state = cluster(
        ("rack1-a", UP, [gpu(0, temp=90), gpu(1, temp=90)]),
        ("rack2-a", UP, [gpu(0, temp=90), gpu(1, temp=90)]),
    )
    ev = AlertEvaluator()
    assert run(ev, state, T0) == ["firing"]
    assert ev.firing_targets() == {("rack1-a", 1)}


@pytest.mark.parametrize(
    "fields, reading",
    [
        (dict(metric="gpu.mem_used_pct", comparison=">=", threshold=90), dict(mem_used=76e9, mem_total=80e9)),
        (
            dict(metric="gpu.throttle", throttle_reason="hw_slowdown", comparison="==", threshold=1),
            dict(throttle=["hw_slowdown"]),
        ),
        (dict(metric="gpu.xid", comparison="==", threshold=79), dict(xid=[13, 79])),
        (dict(metric="gpu.lost", comparison="==", threshold=1), dict(lost=True, temp=None)),
        (dict(metric="gpu.ecc_uncorrected", comparison=">", threshold=0), dict(ecc_uncorrected=2)),
        (dict(metric="gpu.util", comparison="<", threshold=5), dict(util=0)),
        (dict(metric="gpu.power", comparison=">", threshold=650), dict(power=690.5)),
    ],
)
def test_each_gpu_metric_is_read_from_the_sample(rules, run, fields, reading):
    rules(for_seconds=0, **fields)
    ev = AlertEvaluator()
    assert run(ev, cluster(("n1", UP, [gpu(0), gpu(3, **reading)])), T0) == ["firing"]
    assert ev.firing_targets() == {("n1", 3)}


def test_probe_bandwidth_is_a_node_level_rule(rules, run):
    rules(metric="probe.busbw", comparison="<", threshold=100, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("n1", UP, [gpu(0)]), ("n2", UP, [gpu(0)]))
    assert run(ev, state, T0) == []
    assert run(ev, state, T0 + 1, probes={"n1": 40.0, "n2": 180.0}) == ["firing"]
    assert ev.firing_targets() == {("n1", None)}


def test_two_evaluators_on_one_database_record_each_transition_once(rules, run):
    rules(for_seconds=5)
    first, second = AlertEvaluator(), AlertEvaluator()
    sent = []
    for now in (T0, T0 + 0.5, T0 + 5, T0 + 5.5, T0 + 6):
        sent += run(first, hot(90), now)
        sent += run(second, hot(90), now + 0.2)
    for now in (T0 + 20, T0 + 21):
        sent += run(second, hot(70), now)
        sent += run(first, hot(70), now + 0.2)
    assert sent == ["firing", "resolved"]
    assert Transition.objects.count() == 3
    assert first.firing_targets() == second.firing_targets() == set()


def test_a_restarted_evaluator_continues_from_the_database(rules, run):
    rules(for_seconds=5)
    run(AlertEvaluator(), hot(90), T0)
    restarted = AlertEvaluator()
    assert run(restarted, hot(90), T0 + 5) == ["firing"]
    assert Transition.objects.filter(new=PENDING).count() == 1


def test_disabling_a_rule_resolves_its_firing_alerts(rules, run):
    rule = rules(for_seconds=0)
    ev = AlertEvaluator(reload_every=5)
    run(ev, hot(90), T0)
    Rule.objects.filter(id=rule.id).update(enabled=False)
    assert run(ev, hot(90), T0 + 1) == []  # not reloaded yet
    assert run(ev, hot(90), T0 + 6) == ["resolved"]
    assert alert_status(rule) == RESOLVED


def test_a_sample_it_cannot_read_is_skipped_without_raising(rules, run):
    rules(for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("bad", UP, [gpu(0, temp="hot")]), ("good", UP, [gpu(0, temp=95)]))
    assert run(ev, state, T0) == ["firing"]
    assert ev.firing_targets() == {("good", 0)}


def test_default_rules_are_installed_enabled():
    defaults = {r.name: r for r in Rule.objects.filter(enabled=True)}
    assert defaults["GPU temperature high"].condition_text() == "gpu.temp > 85 for 60 s"
    assert defaults["GPU XID error"].condition_text() == "gpu.xid_severity == 1"
    assert defaults["GPU lost"].condition_text() == "gpu.lost == 1"
    assert defaults["GPU uncorrected ECC errors"].condition_text() == "gpu.ecc_uncorrected > 0"
    assert defaults["Node not reporting"].condition_text() == "node.down == 1 for 60 s"


def test_a_database_failure_is_logged_not_raised_and_it_recovers(rules, run, django_db_blocker, caplog):
    rules(for_seconds=0)
    ev = AlertEvaluator()
    with django_db_blocker.block():
        ev.evaluate(hot(90), now=T0)
    assert "alert evaluation failed" in caplog.text
    assert run(ev, hot(90), T0 + 1) == ["firing"]


def test_one_proposal_that_cannot_be_written_does_not_stop_the_others(rules, run):
    # The sample contract keeps a GPU index of -1 out of ingest; the evaluator must hold on its own.
    rule = rules(metric="gpu.xid", comparison=">", threshold=0, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("bad", UP, [gpu(-1, xid=[79])]), ("gpu-01", UP, [gpu(0, xid=[79])]))
    assert run(ev, state, T0) == ["firing"]
    assert alert_status(rule, node="gpu-01", gpu=0) == FIRING
    assert ev.status()["ok"] and ev.status()["proposals_failed"] == 1
    assert run(ev, cluster(("bad", UP, [gpu(-1, xid=[79])]), ("gpu-01", UP, [gpu(0)])), T0 + 1) == ["resolved"]
    assert alert_status(rule, node="gpu-01", gpu=0) == RESOLVED


def test_a_failing_evaluation_is_reported_until_one_runs_through(rules, django_db_blocker):
    rules()
    ev = AlertEvaluator(reload_every=0)
    with django_db_blocker.block():
        ev.evaluate(hot(90), now=T0)
    status = ev.status()
    assert not status["ok"] and status["failing_since"] == T0 and "Database access not allowed" in status["error"]
    ev.evaluate(hot(90), now=T0 + 1)
    assert ev.status()["ok"] and ev.status()["error"] is None


def judged(state: ClusterState, *findings_of: tuple[str, list]) -> dict:
    """The nodes' health as ingest judges it (dashboard.health.node_health), from (node, findings) pairs."""
    book = NodeHealthBook()
    for name, findings in findings_of:
        book.update(name, {"gpus": [], "health": {"checked": list(CHECK_IDS), "findings": findings}})
    book.tick(T0, state.nodes, [])
    return book.nodes


NVLINK_DOWN = {"check": "nvlink_state", "gpu": 3, "status": "fail", "reason": "link 2 down, 17 up"}


def test_node_health_fires_on_a_failing_node_and_its_reason_carries_the_finding_and_action(rules, run):
    rule = rules(metric="node.health", comparison=">=", threshold=2, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("n1", UP, [gpu(0)]), ("n2", UP, [gpu(0)]))
    health = judged(state, ("n1", [NVLINK_DOWN]), ("n2", [{**NVLINK_DOWN, "status": "warn"}]))
    assert run(ev, state, T0, health=health) == ["firing"]
    assert ev.firing_targets() == {("n1", None)}
    transition = Transition.objects.get(alert__rule=rule, new=FIRING)
    assert transition.reason == (f"node.health >= 2 (now 2): GPU 3 NVLink links: link 2 down, 17 up; "
                                 f"action: {action('nvlink_state', 'fail')}")
    # Every webhook format carries it.
    event = Event.from_transitions(transition.event_id, [transition])
    for name, body_format in FORMATS.items():
        body = body_format.render(event, "ops").decode()
        assert "link 2 down, 17 up" in body and action("nvlink_state", "fail") in body, name


def test_a_long_node_health_reason_is_shortened_so_the_action_stays_in_the_notification(rules, run):
    rules(metric="node.health", comparison=">=", threshold=1, for_seconds=0)
    state = cluster(("n1", UP, [gpu(0)]))
    long = {"check": "row_remap", "gpu": 3, "status": "warn", "reason": "r" * 256}
    run(AlertEvaluator(), state, T0, health=judged(state, ("n1", [long])))
    reason = Transition.objects.get(new=FIRING).reason
    assert len(reason) <= 300 and reason.endswith(f"…; action: {action('row_remap', 'warn')}")


def test_node_health_gives_no_value_without_a_verdict(rules, run):
    rules(metric="node.health", comparison="<", threshold=1, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("n1", UP, [gpu(0)]))
    assert run(ev, state, T0, health={}) == []  # no health: "unknown" is not "healthy"
    assert run(ev, state, T0 + 1, health=judged(state, ("n1", []))) == ["firing"]


@pytest.mark.parametrize(
    "metric, finding",
    [
        ("gpu.pcie_degraded", {"check": "pcie_link", "gpu": 3, "status": "fail", "reason": "x8 of x16"}),
        ("gpu.row_remap_pending", {"check": "row_remap", "gpu": 3, "status": "warn", "reason": "a remap is pending"}),
        ("gpu.nvlink_down", NVLINK_DOWN),
    ],
)
def test_each_gpu_health_metric_fires_on_its_gpu_only(rules, run, metric, finding):
    rules(metric=metric, comparison="==", threshold=1, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("n1", UP, [gpu(0), gpu(3)]))
    other = {"check": "clocks", "gpu": 0, "status": "warn", "reason": "thermal slowdown while busy"}
    assert run(ev, state, T0, health=judged(state, ("n1", [other]))) == []
    assert run(ev, state, T0 + 1, health=judged(state, ("n1", [other, finding]))) == ["firing"]
    assert ev.firing_targets() == {("n1", 3)}
    assert run(ev, state, T0 + 2, health=judged(state, ("n1", [other]))) == ["resolved"]


def test_ib_port_down_counts_the_ports_not_active_and_linked_up(rules, run):
    rules(metric="ib.port_down", comparison=">", threshold=0, for_seconds=0)
    ev = AlertEvaluator()
    state = cluster(("n1", UP, [gpu(0)]), ("n2", UP, [gpu(0)]), ("plain", UP, [gpu(0)]))
    port = {"port": "mlx5_0/1", "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400}
    state.nodes["n1"].sample["ib"] = [port, {**port, "port": "mlx5_1/1", "state": "DOWN", "phys_state": "Polling"}]
    state.nodes["n2"].sample["ib"] = [port]
    assert run(ev, state, T0) == ["firing"]
    assert ev.firing_targets() == {("n1", None)}
    assert Alert.objects.get(node="n1").value == 1


def owned_by(user="dana", job="41007", **gpu_fields) -> dict:
    """GPU readings with one process of ``user``'s ``job`` holding memory."""
    process = {"pid": 4242, "name": "jupyter-lab", "user": user, "job": job, "mem_used": 2 << 30}
    return {"processes": [process], **gpu_fields}


@pytest.mark.parametrize("reading, value", [
    (owned_by(util=0), 1),  # allocated, below GPULSE_BUSY_UTIL
    (owned_by(util=5), 0),  # at the threshold: busy
    ({"util": 0, "processes": []}, 0),  # not allocated: not idle, whatever its utilization
    ({"util": 0, "processes": [], "k8s": {"pod": "nb-1", "namespace": "ml", "container": None}}, 1),  # a pod's
    (owned_by(util=None), None),  # allocated, utilization not reported: no verdict
    (owned_by(util=None, lost=True), 0),
])
def test_idle_allocated_reads_allocation_and_the_busy_threshold(settings, reading, value):
    settings.GPULSE_BUSY_UTIL = 5.0
    rule = CompiledRule.compile(Rule(metric="gpu.idle_allocated", comparison="==", threshold=1))
    assert rule.read(gpu(7, **reading)) == value


def test_idle_allocated_takes_its_threshold_from_the_setting(settings):
    settings.GPULSE_BUSY_UTIL = 20.0
    rule = CompiledRule.compile(Rule(metric="gpu.idle_allocated", comparison="==", threshold=1))
    assert rule.read(gpu(7, **owned_by(util=19))) == 1 and rule.read(gpu(7, **owned_by(util=20))) == 0


def test_idle_allocated_judges_by_sm_activity_where_reported_at_the_settings_threshold(settings):
    settings.GPULSE_BUSY_SM_ACTIVITY = 30.0
    rule = CompiledRule.compile(Rule(metric="gpu.idle_allocated", comparison="==", threshold=1))
    stalled = owned_by(util=100, sm_active=0.25)  # kernels run all the time on a quarter of the SMs
    assert rule.read(gpu(7, **stalled)) == 1 and rule.read(gpu(7, **owned_by(util=0, sm_active=0.30))) == 0


def test_an_idle_allocated_gpu_fires_and_the_webhooks_name_its_user_job_and_pod(rules, run, receiver, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    rule = rules(name="GPU allocated but idle", metric="gpu.idle_allocated", comparison="==", threshold=1,
                 for_seconds=1800)
    k8s = {"pod": "nb-dana-0", "namespace": "ml", "container": "notebook"}
    idle = cluster(("gpu-03", UP, [gpu(0, **owned_by("erin", "41008", util=90)), gpu(7, **owned_by(util=0, k8s=k8s))]))
    ev = AlertEvaluator()
    assert run(ev, idle, T0) == []
    assert run(ev, idle, T0 + 1800) == ["firing"]
    assert ev.firing_targets() == {("gpu-03", 7)}
    fired = Transition.objects.get(alert__rule=rule, new=FIRING)
    assert fired.reason == ("gpu.idle_allocated == 1 for 1800 s (now 1), held 1800 s: "
                            "user dana, job 41007, pod ml/nb-dana-0")
    assert (fired.owner_user, fired.owner_job, fired.owner_pod) == ("dana", "41007", "ml/nb-dana-0")

    # Delivered as the webhook worker delivers it, to a real receiver, in every format.
    for name in FORMATS:
        endpoint = WebhookEndpoint.objects.create(name=name, url=receiver.url, format=name)
        assert delivery.attempt(endpoint, Event.from_transitions(fired.event_id, [fired]), 1).outcome == "ok"
    gpulse_body, alertmanager, slack = (orjson.loads(r["body"]) for r in receiver.wait_for(3))
    assert gpulse_body["alerts"][0]["owner"] == {"user": "dana", "job": "41007", "pod": "ml/nb-dana-0"}
    assert "user dana, job 41007" in gpulse_body["alerts"][0]["reason"]
    [am_alert] = alertmanager["alerts"]
    assert {k: am_alert["annotations"][k] for k in ("user", "job", "pod")} == gpulse_body["alerts"][0]["owner"]
    assert "gpu-03 GPU 7" in slack["text"] and "user dana, job 41007, pod ml/nb-dana-0" in slack["text"]

    # Busy again: resolved, still naming whose it is.
    busy = cluster(("gpu-03", UP, [gpu(0, **owned_by("erin", "41008", util=90)), gpu(7, **owned_by(util=80))]))
    assert run(ev, busy, T0 + 1900) == ["resolved"]
    resolved = Transition.objects.get(alert__rule=rule, new=RESOLVED)
    assert resolved.reason.endswith("back to normal: user dana, job 41007") and resolved.owner_user == "dana"


def test_an_owner_named_by_the_node_is_escaped_for_slack_and_shortened_in_the_reason(rules, run):
    rules(metric="gpu.idle_allocated", comparison="==", threshold=1, for_seconds=0)
    user, job = "<!channel> & <@U024BE7LH>", "j" * 128  # the node's texts: at most 128 characters each
    run(AlertEvaluator(), cluster(("n1", UP, [gpu(0, **owned_by(user, job, util=0))])), T0)
    fired = Transition.objects.get(new=FIRING)
    assert fired.owner_job == job  # in full where a field holds it
    assert len(fired.reason) <= 300 and f"job {'j' * 59}…" in fired.reason
    slack = orjson.loads(FORMATS["slack"].render(Event.from_transitions(fired.event_id, [fired]), "ops"))
    assert "user &lt;!channel&gt; &amp; &lt;@U024BE7LH&gt;" in slack["text"] and "<!channel>" not in slack["text"]


def test_other_metrics_name_no_owner(rules, run):
    rules(metric="gpu.util", comparison="<", threshold=5, for_seconds=0)
    run(AlertEvaluator(), cluster(("n1", UP, [gpu(0, **owned_by(util=0))])), T0)
    fired = Transition.objects.get(new=FIRING)
    assert "dana" not in fired.reason and fired.owner_user == ""
    [alert] = orjson.loads(FORMATS["gpulse"].render(Event.from_transitions(fired.event_id, [fired]), "ops"))["alerts"]
    assert alert["owner"] is None
