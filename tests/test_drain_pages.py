"""Drain on the pages and the API: the rule's drain fields, and the node page's Scheduler section."""

import json
import time

import pytest
from django.utils import timezone

from dashboard.alerts.models import DEFAULT_RESUME_AFTER, MAX_RESUME_AFTER, Rule
from dashboard.scheduler.models import DrainRecord
from gpulse import schema
from gpulse.keys import Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db

RULE = {"name": "NVLink down", "metric": "gpu.temp", "comparison": ">", "threshold": 85}


def post(client, url, data):
    return client.post(url, data=json.dumps(data), content_type="application/json")


def test_a_rule_is_created_with_drain_and_resume_after_through_the_api(operator):
    created = post(operator, "/api/v1/rules", {**RULE, "drain": True, "resume_after": 120})
    assert created.status_code == 201
    got = operator.get(f"/api/v1/rules/{created.json()['id']}").json()
    assert (got["drain"], got["resume_after"]) == (True, 120)


def test_a_rule_left_without_drain_only_alerts(operator):
    created = post(operator, "/api/v1/rules", RULE)
    rule = Rule.objects.get(id=created.json()["id"])
    assert (rule.drain, rule.resume_after) == (False, DEFAULT_RESUME_AFTER)


@pytest.mark.parametrize("resume_after", [MAX_RESUME_AFTER + 1, -1])
def test_a_resume_after_out_of_bounds_is_refused(operator, resume_after):
    refused = post(operator, "/api/v1/rules", {**RULE, "drain": True, "resume_after": resume_after})
    assert refused.status_code == 400
    assert "resume_after" in refused.content.decode()


def test_the_rules_page_offers_drain_and_shows_which_rules_drain(operator):
    Rule.objects.create(name="drains", metric="gpu.temp", threshold=85, drain=True, resume_after=900)
    page = operator.get("/alerts/rules/").content.decode()
    assert 'name="drain"' in page and 'name="resume_after"' in page
    assert "yes, resume after 15 min" in page


@pytest.fixture
def node_in_redis(redis_client):
    now = time.time()
    redis_client.set(Keys().node("gpu-07"), schema.encode(sample("gpu-07", ts=now, interval=60)))


def test_the_node_page_lists_the_nodes_drains_escaped(viewer, node_in_redis):
    rule = Rule.objects.create(name="<b>hot</b>", metric="gpu.temp", threshold=85, drain=True)
    now = timezone.now()
    DrainRecord.objects.create(node="gpu-07", rule=rule, rule_name=rule.name, reason="gpulse: <script>x</script>",
                               state=DrainRecord.DRAINED, drained_at=now)
    DrainRecord.objects.create(node="gpu-07", rule=rule, rule_name=rule.name, reason="gpulse: hot",
                               state=DrainRecord.SKIPPED_BY_PERSON, error="a person drained it again")
    DrainRecord.objects.create(node="gpu-08", rule_name="other node", reason="gpulse: x", state=DrainRecord.DRAINED)
    page = viewer.get("/nodes/gpu-07/").content.decode()
    section = page[page.index('id="scheduler"'):]
    assert "&lt;b&gt;hot&lt;/b&gt;" in section and "<b>hot</b>" not in section
    assert "gpulse: &lt;script&gt;x&lt;/script&gt;" in section and "<script>x" not in section
    assert "left to a person" in section and "a person drained it again" in section
    assert "other node" not in section


def test_a_node_gpulse_never_drained_says_so(viewer, node_in_redis):
    page = viewer.get("/nodes/gpu-07/").content.decode()
    assert "gpulse has not drained this node." in page


def test_a_rule_from_the_page_without_resume_after_keeps_the_default(admin):
    response = admin.post("/alerts/rules/", {"name": "drains", "metric": "gpu.temp", "comparison": ">",
                                             "threshold": "85", "for_seconds": "0", "severity": "info",
                                             "enabled": "on", "repeat_interval": "3600", "drain": "on"})
    assert response.status_code == 302
    rule = Rule.objects.get(name="drains")
    assert (rule.drain, rule.resume_after) == (True, DEFAULT_RESUME_AFTER)


def test_the_rules_page_says_when_drain_is_off_on_this_server(operator, settings):
    settings.GPULSE_SLURM_DRAIN = False
    assert 'id="drain-off"' in operator.get("/alerts/rules/").content.decode()
    settings.GPULSE_SLURM_DRAIN = True
    assert 'id="drain-off"' not in operator.get("/alerts/rules/").content.decode()
