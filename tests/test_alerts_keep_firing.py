"""keep_firing_for, as Prometheus has it: a firing alert whose condition flaps stays one alert."""

import json

import pytest

from dashboard.alerts.evaluate import RELOAD_EVERY, AlertEvaluator
from dashboard.alerts.models import FIRING, INACTIVE, RESOLVED, Rule, Transition
from dashboard.alerts.words import summary
from tests.test_alerts_evaluate import T0, alert_status, hot, rules, run  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def test_a_flapping_condition_is_held_firing_and_resolves_once_it_stays_false(rules, run):  # noqa: F811 (the fixture)
    rule = rules(for_seconds=0, keep_firing_for=30)
    ev = AlertEvaluator()
    kinds = []
    for second in range(0, 60):  # hot every 5 s, for a minute: 12 flaps
        kinds += run(ev, hot(90 if second % 5 == 0 else 70), T0 + second)
    assert kinds == ["firing"]  # once, though the evaluator reloaded from the database every RELOAD_EVERY
    assert 60 > 2 * RELOAD_EVERY
    assert alert_status(rule) == FIRING
    # Hot last at second 55: false since 56, resolved once that is 30 s ago.
    assert run(ev, hot(70), T0 + 56 + 29) == []
    assert run(ev, hot(70), T0 + 56 + 30) == ["resolved"]
    assert Transition.objects.get(new=RESOLVED).reason == "gpu.temp > 85 (now 70): back to normal for 30 s"


def test_without_keep_firing_for_each_flap_fires_and_resolves(rules, run):  # noqa: F811 (the fixture)
    rules(for_seconds=0)
    ev = AlertEvaluator()
    kinds = [kind for second in range(0, 20) for kind in run(ev, hot(90 if second % 5 == 0 else 70), T0 + second)]
    assert kinds == ["firing", "resolved"] * 4


def test_a_pending_alert_is_not_held(rules, run):  # noqa: F811 (the fixture)
    rule = rules(for_seconds=10, keep_firing_for=300)
    ev = AlertEvaluator()
    run(ev, hot(90), T0)
    run(ev, hot(70), T0 + 1)
    assert alert_status(rule) == INACTIVE


def test_keep_firing_for_is_set_through_the_api_and_said_on_the_rule_page(operator):
    created = operator.post("/api/v1/rules", content_type="application/json", data=json.dumps(
        {"name": "Xid", "metric": "gpu.xid", "comparison": ">", "threshold": 0, "for_seconds": 0,
         "severity": "warning", "repeat_interval": 3600, "keep_firing_for": 900}))
    assert created.status_code == 201
    assert operator.get(f"/api/v1/rules/{created.json()['id']}").json()["keep_firing_for"] == 900
    rule = Rule.objects.get(name="Xid")
    assert "stays firing until the condition has been false for 15 min" in summary(rule)
    assert "stays firing until" in operator.get(f"/alerts/rules/{rule.pk}/").content.decode()
    too_long = operator.patch(f"/api/v1/rules/{rule.pk}", content_type="application/json",
                              data=json.dumps({"keep_firing_for": 2 * 86400}))
    assert too_long.status_code == 400 and "keep_firing_for" in too_long.json()["error"]


def test_the_default_xid_and_failing_node_rules_are_held_firing():
    held = dict(Rule.objects.filter(keep_firing_for__gt=0).values_list("name", "keep_firing_for"))
    assert held == {"GPU XID error": 900, "GPU Xid needs a reset or replacement": 900, "Node failing": 300}
