"""Alert rows say why and what to do, and offer "silence": the alerts page and the node page's Alerts section."""

import html
import re
import time

import pytest

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import FIRING, Alert, Rule, Silence, Transition
from gpulse import schema
from gpulse.health import action
from gpulse.keys import Keys
from gpulse.status import UP
from tests.samples import sample
from tests.test_alerts_evaluate import T0, cluster, gpu, judged, run  # noqa: F401  (run: a fixture)

pytestmark = pytest.mark.django_db

# A finding's reason is the node's text: the pages escape it.
PCIE = {"check": "pcie_link", "gpu": 5, "status": "fail", "reason": "x8 of x16 <script>alert(1)</script>"}


@pytest.fixture
def failing_node(run):  # noqa: F811 (the fixture)
    """sim-180 failing (PCIe x8 of x16 on GPU 5), its "Node failing" alert firing; and an Xid on its GPU 2."""
    state = cluster(("sim-180", UP, [gpu(2, xid=[79]), gpu(5)]))
    evaluator = AlertEvaluator()
    run(evaluator, state, T0, health=judged(state, ("sim-180", [PCIE])))
    return evaluator, state


def row_of(page: str, text: str) -> str:
    [row] = [row for row in page.split("<tr")[1:] if text in row]
    return row.split("</tr>")[0]


def silence_form_fields(row: str) -> dict:
    form = row.split('class="row-silence"')[1].split("</form>")[0]
    return {name: html.unescape(value) for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', form)}


def test_the_alerts_page_row_shows_the_reason_and_the_action_apart(admin, failing_node):
    page = admin.get("/alerts/").content.decode()
    row = row_of(page, ">sim-180</a>")
    assert '<td class="action">' + action("pcie_link", "fail") + "</td>" in row
    reason = row.split('<td class="reason">')[1].split("</td>")[0]
    # What was found, apart from the condition (which the group's heading says in words) and the action.
    assert reason == "GPU 5 PCIe link: x8 of x16 &lt;script&gt;alert(1)&lt;/script&gt;"
    assert "<script>alert" not in page
    xid = row_of(page, ">sim-180 GPU 2</a>")
    assert "Xid 79 (bus): GPU has fallen off the bus" in xid and "Drain the node and reboot it" in xid


def test_silence_from_a_row_mutes_that_rule_on_that_target_only(admin, failing_node, run):  # noqa: F811 (the fixture)
    evaluator, state = failing_node
    row = row_of(admin.get("/alerts/").content.decode(), ">sim-180 GPU 2</a>")
    fields = silence_form_fields(row)
    xid_rule = Rule.objects.get(name="GPU Xid needs a reset or replacement")
    assert fields == {"rule": str(xid_rule.pk), "node_glob": "sim-180", "gpu": "2", "minutes": "60",
                      "comment": "silenced from its alert row", "csrfmiddlewaretoken": fields["csrfmiddlewaretoken"]}
    assert admin.post("/alerts/silences/", fields).status_code == 302
    silence = Silence.objects.get()
    assert (silence.rule_id, silence.node_glob, silence.gpu, silence.created_by) == (xid_rule.pk, "sim-180", 2,
                                                                                     "admin")
    assert silence.matches(xid_rule.pk, "sim-180", 2) and not silence.matches(xid_rule.pk, "sim-180", 3)
    # The node healed and GPU 2's alert resolved: the next Xid on GPU 2 fires muted, GPU 3's pages.
    Rule.objects.update(keep_firing_for=0)
    quiet = cluster(("sim-180", UP, [gpu(2), gpu(3), gpu(5)]))
    run(evaluator, quiet, T0 + 10, health=judged(quiet, ("sim-180", [])))
    again = cluster(("sim-180", UP, [gpu(2, xid=[79]), gpu(3, xid=[79]), gpu(5)]))
    run(evaluator, again, T0 + 11, health=judged(again, ("sim-180", [])))
    fired = Transition.objects.filter(alert__rule=xid_rule, new=FIRING, created__gt=Transition.objects.get(
        alert__gpu=2, alert__rule=xid_rule, new="resolved").created)
    assert {(t.alert.gpu, t.notify) for t in fired} == {(2, False), (3, True)}


def test_a_viewer_sees_reasons_but_no_silence_button(viewer, failing_node):
    page = viewer.get("/alerts/").content.decode()
    assert action("pcie_link", "fail") in page and "row-silence" not in page


def test_the_node_pages_alerts_section_shows_reason_action_and_silence(admin, viewer, failing_node, redis_client):
    redis_client.set(Keys().node("sim-180"), schema.encode(sample("sim-180", ts=time.time(), interval=60)))
    for path in ("/alerts/nodes/sim-180/", "/nodes/sim-180/"):
        section = admin.get(path).content.decode().split('id="node-alerts"')[1].split("</section>")[0]
        row = row_of(section, "Node failing")
        assert '<td class="action">' + action("pcie_link", "fail") + "</td>" in row
        assert "GPU 5 PCIe link: x8 of x16 &lt;script&gt;" in row
        assert silence_form_fields(row)["node_glob"] == "sim-180", path
        assert "row-silence" not in viewer.get(path).content.decode(), path
    assert Alert.objects.filter(node="sim-180", status=FIRING).count() == 2
