"""Rules in words and units on every alerts page: "GPU temperature above 85 °C for 5 min", never
"gpu.temp > 85 for 300 s" or "14400 s"."""

import pytest

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import METRICS, Rule
from dashboard.alerts.words import condition, span
from gpulse.status import UP
from tests.test_alerts_evaluate import T0, cluster, gpu

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("seconds", "words"), [
    (0, "0 s"), (45, "45 s"), (90, "1 min 30 s"), (300, "5 min"), (5400, "1 h 30 min"), (14400, "4 h"),
    (90000, "1 d 1 h"),
])
def test_a_duration_reads_in_its_units(seconds, words):
    assert span(seconds) == words


@pytest.mark.parametrize(("fields", "words"), [
    (dict(metric="gpu.temp", comparison=">", threshold=85, for_seconds=300), "GPU temperature above 85 °C for 5 min"),
    (dict(metric="gpu.util", comparison="<", threshold=10, for_seconds=5400),
     "GPU utilization below 10 % for 1 h 30 min"),
    (dict(metric="gpu.power", comparison=">=", threshold=650.5), "GPU power draw at or above 650.5 W"),
    (dict(metric="probe.busbw", comparison="<=", threshold=100), "NCCL probe bus bandwidth at or below 100 GB/s"),
    # A 0/1 flag that fires on 1 reads as what 1 means; other tests on it say the value and its legend.
    (dict(metric="gpu.lost", comparison="==", threshold=1), "GPU lost / fallen off the bus"),
    (dict(metric="gpu.lost", comparison="==", threshold=0), "GPU lost / fallen off the bus equal to 0 (1 = lost)"),
    (dict(metric="gpu.throttle", throttle_reason="hw_slowdown", comparison="==", threshold=1, for_seconds=60),
     "throttle reason hw_slowdown present for 1 min"),
    (dict(metric="gpu.xid", comparison="!=", threshold=0), "XID error code other than 0 (0 = none)"),
    (dict(metric="node.health", comparison=">=", threshold=2),
     "node health verdict at or above 2 (0 healthy, 1 degraded, 2 failing)"),
])
def test_a_condition_reads_in_words_and_units(fields, words):
    assert condition(Rule(**fields)) == words


def test_a_metric_this_version_does_not_know_reads_as_stored():
    assert condition(Rule(metric="gpu.future", comparison=">", threshold=1)) == "gpu.future > 1"


def test_the_metric_choices_read_as_before():
    # The form's labels come from the same table as the words; changed labels would need a migration.
    labels = dict(METRICS)
    assert labels["gpu.temp"] == "GPU temperature (°C)"
    assert labels["gpu.lost"] == "GPU lost / fallen off the bus (1 = lost)"
    assert labels["gpu.ecc_uncorrected"] == "uncorrected ECC errors"
    assert labels["probe.busbw"] == "NCCL probe bus bandwidth (GB/s)"


def test_the_rules_page_says_conditions_and_durations_in_words(viewer):
    Rule.objects.create(name="Hot for long", metric="gpu.temp", comparison=">", threshold=85, for_seconds=300,
                        repeat_interval=14400, drain=True, resume_after=600)
    rules = viewer.get("/alerts/rules/").content.decode().split('id="rules"')[1].split("</table>")[0]
    row = rules.split("Hot for long")[1].split("</tr>")[0]
    assert "GPU temperature above 85 °C for 5 min" in row
    assert "every 4 h" in row and "resume after 10 min" in row
    assert "gpu.temp" not in rules and "14400" not in rules and "600 s" not in rules


def test_the_rule_page_says_what_the_rule_does_in_words(viewer, operator):
    rule = Rule.objects.create(name="Hot for long", metric="gpu.temp", comparison=">", threshold=85,
                               for_seconds=300, node_glob="gpu-0*", repeat_interval=14400)
    for client in (viewer, operator):  # read-only, and above the form
        summary = client.get(f"/alerts/rules/{rule.id}/").content.decode().split('id="rule-summary"')[1]
        summary = summary.split("</p>")[0]
        assert "GPU temperature above 85 °C for 5 min on gpu-0*" in summary and "every 4 h" in summary
    # A refused edit leaves the rule as it was, and the sentence says the rule as it is.
    refused = operator.post(f"/alerts/rules/{rule.id}/", {
        "name": rule.name, "metric": "gpu.throttle", "comparison": ">", "threshold": "0", "for_seconds": "0",
        "severity": "info", "repeat_interval": "3600"}).content.decode()
    assert "gpu.throttle needs the throttle reason" in refused
    assert "GPU temperature above 85 °C for 5 min" in refused.split('id="rule-summary"')[1].split("</p>")[0]


def test_the_alerts_page_says_conditions_and_pending_durations_in_words(viewer):
    Rule.objects.all().delete()
    Rule.objects.create(name="Too busy", metric="gpu.util", comparison=">", threshold=90, for_seconds=600)
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(("gpu-01", UP, [gpu(0, util=99)])), now=T0)
    page = viewer.get("/alerts/").content.decode()
    group = page.split('class="alert-group"')[1].split("</details>")[0]
    assert "GPU utilization above 90 % for 10 min" in group and "of 10 min" in group
    assert "gpu.util" not in group and "600 s" not in group
