"""A silence or a rule change takes effect at the evaluator's next tick, not at its next timed reload."""

import json
import time

import pytest

from dashboard.alerts.evaluate import RELOAD_EVERY, AlertEvaluator
from dashboard.alerts.models import FIRING, RESOLVED, Rule, Silence, Transition
from tests.test_alerts_evaluate import alert_status, hot, run  # noqa: F401  (run: a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def too_hot():
    Rule.objects.all().delete()
    return Rule.objects.create(name="Too hot", metric="gpu.temp", comparison=">", threshold=85, for_seconds=0)


@pytest.fixture
def loaded(too_hot, run):  # noqa: F811 (the fixture)
    """An evaluator that has just loaded its rules and silences, at ``now``."""
    evaluator, now = AlertEvaluator(), time.time()
    assert run(evaluator, hot(70), now) == []
    return evaluator, now


def test_a_silence_created_on_the_alerts_page_just_before_a_fault_mutes_its_notification(admin, loaded, too_hot, run):  # noqa: F811 (the fixture)
    evaluator, now = loaded
    created = admin.post("/alerts/silences/", {"node_glob": "gpu-01", "minutes": "30", "comment": "reboot"})
    assert created.status_code == 302 and Silence.objects.count() == 1
    assert RELOAD_EVERY > 1  # else the timed reload alone would pass this test
    assert run(evaluator, hot(90), now + 1) == []
    assert alert_status(too_hot) == FIRING  # muted, still tracked
    assert not Transition.objects.filter(notify=True).exists()


def test_a_silence_made_through_the_api_mutes_at_the_next_tick(admin, loaded, run):  # noqa: F811 (the fixture)
    evaluator, now = loaded
    created = admin.post("/api/v1/silences", data=json.dumps({"node_glob": "gpu-0*", "minutes": 30}),
                         content_type="application/json")
    assert created.status_code == 201
    assert run(evaluator, hot(90), now + 0.5) == []


def test_expiring_a_silence_notifies_what_it_muted_at_the_next_tick(admin, loaded, too_hot, run):  # noqa: F811 (the fixture)
    evaluator, now = loaded
    admin.post("/alerts/silences/", {"node_glob": "gpu-01", "minutes": "30"})
    assert run(evaluator, hot(90), now + 1) == []
    silence = Silence.objects.get()
    assert admin.post(f"/alerts/silences/{silence.pk}/expire").status_code == 302
    assert run(evaluator, hot(90), now + 2) == ["repeat"]
    assert Transition.objects.get(notify=True).reason.endswith("no longer silenced or inhibited")


def test_a_rule_disabled_through_the_api_resolves_its_alert_at_the_next_tick(operator, loaded, too_hot, run):  # noqa: F811 (the fixture)
    evaluator, now = loaded
    assert run(evaluator, hot(90), now + 1) == ["firing"]
    changed = operator.patch(f"/api/v1/rules/{too_hot.pk}", data=json.dumps({"enabled": False}),
                             content_type="application/json")
    assert changed.status_code == 200
    assert run(evaluator, hot(90), now + 2) == ["resolved"]
    assert alert_status(too_hot) == RESOLVED


def test_a_threshold_raised_and_saved_applies_at_the_next_tick(operator, loaded, too_hot, run):  # noqa: F811 (the fixture)
    evaluator, now = loaded
    assert run(evaluator, hot(90), now + 1) == ["firing"]
    too_hot.threshold = 95
    too_hot.save()
    assert run(evaluator, hot(90), now + 2) == ["resolved"]
