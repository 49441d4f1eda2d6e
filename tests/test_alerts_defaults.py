"""The rules every install starts with page for what on-call must act on: a failing node, a down node,
an Xid whose catalogue action is a reset or a replacement; each notification carries the reason and action."""

import orjson
import pytest

from dashboard.alerts import delivery
from dashboard.alerts.conditions import DOWN_ACTION
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.formats import Event
from dashboard.alerts.models import FIRING, Rule, Transition, WebhookEndpoint
from gpulse.health import action
from gpulse.status import DOWN, UP
from gpulse.xid import classify
from tests.test_alerts_evaluate import T0, cluster, gpu, judged, run  # noqa: F401  (run: a fixture)

pytestmark = pytest.mark.django_db

PCIE_X8 = {"check": "pcie_link", "gpu": 5, "status": "fail", "reason": "PCIe x8 of x16 while busy"}
IB_DOWN = {"check": "ib_port", "gpu": None, "status": "fail", "reason": "mlx5_0 port 1 DOWN/Disabled"}


def fired(rule_name: str) -> list[Transition]:
    return list(Transition.objects.filter(alert__rule__name=rule_name, new=FIRING, notify=True))


def test_a_failing_node_pages_critical_with_its_finding_and_action(run):  # noqa: F811 (the fixture)
    state = cluster(("sim-180", UP, [gpu(5)]), ("sim-222", UP, [gpu(0)]), ("sim-001", UP, [gpu(0)]))
    health = judged(state, ("sim-180", [PCIE_X8]), ("sim-222", [IB_DOWN]), ("sim-001", []))
    assert sorted(run(AlertEvaluator(), state, T0, health=health)) == ["firing", "firing"]
    pages = {t.alert.node: t for t in fired("Node failing")}
    assert set(pages) == {"sim-180", "sim-222"}
    assert Rule.objects.get(name="Node failing").severity == "critical"
    assert pages["sim-180"].reason.endswith(f"PCIe x8 of x16 while busy; action: {action('pcie_link', 'fail')}")
    assert pages["sim-222"].reason.endswith(f"mlx5_0 port 1 DOWN/Disabled; action: {action('ib_port', 'fail')}")


def test_a_down_node_pages_with_how_long_it_has_been_silent_and_what_to_do(run):  # noqa: F811 (the fixture)
    ev = AlertEvaluator()
    down = cluster(("sim-050", DOWN, [gpu(0)]))  # its last sample arrived at T0
    assert run(ev, down, T0 + 5) == []
    assert run(ev, down, T0 + 65) == ["firing"]
    [page] = fired("Node not reporting")
    assert Rule.objects.get(name="Node not reporting").severity == "critical"
    assert page.reason == f"node.down == 1 for 60 s (now 1), held 60 s: last sample 65 s ago; action: {DOWN_ACTION}"


def test_xid_79_pages_critical_with_its_action_and_the_warning_rule_stays_quiet(run, receiver, settings):  # noqa: F811 (the fixture)
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    ev = AlertEvaluator()
    assert run(ev, cluster(("sim-001", UP, [gpu(0), gpu(3, xid=[79, 45])])), T0) == ["firing"]
    [page] = fired("GPU Xid needs a reset or replacement")
    assert page.alert.gpu == 3 and page.alert.rule.severity == "critical"
    xid79 = classify(79)
    assert page.reason == (f"gpu.xid_severity >= 2 (now 2): Xid 79 (bus): {xid79.description}; "
                           f"action: {xid79.action}")
    assert fired("GPU XID error") == []

    endpoint = WebhookEndpoint.objects.create(name="pager", url=receiver.url, format="alertmanager")
    assert delivery.attempt(endpoint, Event.from_transitions(page.event_id, [page]), 1).outcome == "ok"
    [alert] = orjson.loads(receiver.wait_for(1)[0]["body"])["alerts"]
    assert alert["labels"]["severity"] == "critical"
    assert xid79.action in orjson.dumps(alert).decode()


def test_an_application_xid_warns_only(run):  # noqa: F811 (the fixture)
    assert run(AlertEvaluator(), cluster(("sim-001", UP, [gpu(0, xid=[13])])), T0) == ["firing"]
    [warning] = fired("GPU XID error")
    assert warning.alert.rule.severity == "warning"
    assert warning.reason.startswith("gpu.xid_severity == 1 (now 1): Xid 13 (application): Graphics Engine Exception")
    assert fired("GPU Xid needs a reset or replacement") == []


LOST = [{"check": "gpu_count", "gpu": 3, "status": "fail", "reason": "GPU 3 is lost (fallen off the bus)"},
        {"check": "xid", "gpu": 3, "status": "fail", "reason": "Xid 79 (bus): GPU has fallen off the bus"}]


def lost_gpu_3():
    return cluster(("sim-001", UP, [gpu(0), gpu(3, lost=True, xid=[79])]))


def test_one_lost_gpu_pages_once_the_node_alert_inhibiting_the_gpu_alerts(run):  # noqa: F811 (the fixture)
    ev = AlertEvaluator()
    state = lost_gpu_3()
    assert run(ev, state, T0, health=judged(state, ("sim-001", LOST))) == ["firing"]
    [page] = Transition.objects.filter(notify=True)
    assert page.alert.rule.name == "Node failing" and "fallen off the bus" in page.reason
    inhibited = Transition.objects.filter(new=FIRING, notify=False)
    assert {t.alert.rule.name for t in inhibited} == {"GPU lost", "GPU Xid needs a reset or replacement"}
    assert all(t.alert.gpu == 3 for t in inhibited)


def test_a_gpu_alert_still_firing_when_its_node_alert_resolves_is_notified_then(run):  # noqa: F811 (the fixture)
    Rule.objects.filter(name="Node failing").update(keep_firing_for=0)
    ev = AlertEvaluator()
    state = lost_gpu_3()
    run(ev, state, T0, health=judged(state, ("sim-001", LOST)))
    # The node's health no longer fails (say its checks were turned off), the GPU is still lost.
    kinds = run(ev, state, T0 + 1, health=judged(state, ("sim-001", [])))
    assert sorted(kinds) == ["repeat", "repeat", "resolved"]
    renotified = Transition.objects.filter(old=FIRING, new=FIRING, notify=True)
    assert {t.alert.rule.name for t in renotified} == {"GPU lost", "GPU Xid needs a reset or replacement"}
    assert all(", no longer silenced or inhibited" in t.reason for t in renotified)


def test_only_a_node_alert_as_severe_and_about_the_whole_node_inhibits(run):  # noqa: F811 (the fixture)
    Rule.objects.create(name="Node degraded", metric="node.health", comparison=">=", threshold=1, severity="warning")
    Rule.objects.filter(name="Node failing").delete()
    ev = AlertEvaluator()
    state = lost_gpu_3()
    degraded = [{**finding, "status": "warn"} for finding in LOST]
    kinds = run(ev, state, T0, health=judged(state, ("sim-001", degraded)))
    # A warning about the node does not stand for the critical GPU alerts: all three page.
    assert kinds == ["firing"] * 3
