"""HTML pages: alerts (firing/pending/resolved), rules, webhooks with "Send test", simulator."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.alerts.context_processors import firing_alerts
from dashboard.alerts.delivery import signature
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import (
    FIRING,
    PENDING,
    Alert,
    DeliveryAttempt,
    Notification,
    Rule,
    Silence,
    Transition,
    WebhookEndpoint,
    fingerprint,
)
from gpulse.keys import Keys
from gpulse.status import UP
from tests.test_alerts_evaluate import T0, cluster, gpu
from tests.test_webhook_deadline import DEADLINE, SLACK

pytestmark = pytest.mark.django_db


def _group(page: str, rule: str) -> str:
    """Return the HTML of ``rule``'s group on the alerts page."""
    groups = page.split('class="alert-group"')[1:]
    [group] = [g.split("</details>")[0] for g in groups if f'<span class="rule-name">{rule}</span>' in g]
    return group


def _targets(group: str) -> list[str]:
    """Return the targets of a group's rows, in order."""
    return [row.split('">', 2)[2].split("</a>")[0] for row in group.split("<tbody>")[1].split("<tr")[1:]]


def test_the_alerts_page_shows_firing_pending_and_resolved_with_durations(viewer):
    Rule.objects.all().delete()
    Rule.objects.create(name="Too hot", metric="gpu.temp", comparison=">", threshold=85, for_seconds=0)
    Rule.objects.create(name="Too busy", metric="gpu.util", comparison=">", threshold=90, for_seconds=600)
    ev = AlertEvaluator(enqueue=lambda ids: None)
    ev.evaluate(cluster(("gpu-01", UP, [gpu(0, temp=91, util=99), gpu(1, temp=92)])), now=T0)
    ev.evaluate(cluster(("gpu-01", UP, [gpu(0, temp=91, util=99), gpu(1, temp=70)])), now=T0 + 192)
    page = viewer.get("/alerts/").content.decode()
    hot = _group(page, "Too hot")
    assert _targets(hot) == ["gpu-01 GPU 0"] and "1 firing" in hot and "status-firing" in hot
    busy = _group(page, "Too busy")
    assert _targets(busy) == ["gpu-01 GPU 0"] and "1 pending" in busy and "of 10 min" in busy
    resolved = page.split('id="resolved"')[1].split("</table>")[0]
    assert "gpu-01 GPU 1" in resolved and "3 min 12 s" in resolved


def test_a_node_pages_alerts_section_comes_alone_for_its_refresh(viewer, client):
    Rule.objects.all().delete()
    Rule.objects.create(name="Too hot", metric="gpu.temp", comparison=">", threshold=85, for_seconds=0)
    ev = AlertEvaluator(enqueue=lambda ids: None)
    ev.evaluate(cluster(("gpu-01", UP, [gpu(0), gpu(1, temp=91)]), ("gpu-02", UP, [gpu(0, temp=92)])), now=T0)
    section = viewer.get("/alerts/nodes/gpu-01/").content.decode().strip()
    assert section.startswith('<section class="panel" id="node-alerts" data-refresh="/alerts/nodes/gpu-01/">')
    assert section.count('<tr class="status-firing"') == 1 and '"firing_gpus": [1]' in section
    assert "No alerts firing" in viewer.get("/alerts/nodes/gpu-03/").content.decode()
    assert client.get("/alerts/nodes/gpu-01/").status_code == 302  # logged out: to the login page


def _active_alerts(rule: Rule, firing: int, pending: int = 0) -> None:
    """Write ``firing`` and ``pending`` alerts of ``rule`` as the evaluator leaves them, the oldest first."""
    start = timezone.now() - timedelta(hours=3)
    Alert.objects.bulk_create(
        Alert(fingerprint=fingerprint(rule.id, f"node-{n:04d}", 0), rule=rule, node=f"node-{n:04d}", gpu=0,
              status=FIRING if n < firing else PENDING, status_since=start + timedelta(seconds=n), value=91)
        for n in range(firing + pending)
    )


def test_the_alerts_page_groups_alerts_by_rule_with_counts_and_the_oldest(viewer):
    Rule.objects.all().delete()
    broad = Rule.objects.create(name="Broad", metric="gpu.temp", comparison=">", threshold=85, for_seconds=300,
                                severity="warning")
    narrow = Rule.objects.create(name="Narrow", metric="gpu.lost", comparison="==", threshold=1,
                                 severity="critical")
    _active_alerts(broad, firing=1145, pending=3)
    _active_alerts(narrow, firing=1)
    page = viewer.get("/alerts/").content.decode()
    assert page.count('class="alert-group"') == 2
    # The critical group first, then by name, so a refresh never moves a group under the reader's eyes.
    assert page.index('<span class="rule-name">Narrow</span>') < page.index('<span class="rule-name">Broad</span>')
    group = _group(page, "Broad")
    summary = group.split("</summary>")[0]
    assert "1145 firing" in summary and "3 pending" in summary and "warning" in summary
    assert "GPU temperature above 85 °C for 5 min" in summary
    oldest = Alert.objects.filter(rule=broad).earliest("status_since").status_since
    # In UTC, labelled, for local-time.js to show in the browser's zone (test_browser_time.py).
    assert (f'oldest since <time class="local-time" datetime="{oldest:%Y-%m-%dT%H:%M:%SZ}" data-precision="minute">'
            f'{oldest:%Y-%m-%d %H:%M} UTC</time> (3 h 00 min)') in summary
    # Closed, and at most one page of rows: never the 1,148-row table.
    assert " open" not in group.split(">")[0]
    assert len(_targets(group)) == 50 and _targets(group)[0] == "node-0000 GPU 0"
    assert "1–50 of 1148" in group and f'href="?rule={broad.id}&amp;page=2#rule-{broad.id}"' in group


def test_a_group_pages_through_its_alerts_within_bounds(viewer):
    Rule.objects.all().delete()
    broad = Rule.objects.create(name="Broad", metric="gpu.temp", comparison=">", threshold=85)
    other = Rule.objects.create(name="Other", metric="gpu.lost", comparison="==", threshold=1)
    _active_alerts(broad, firing=120, pending=3)
    _active_alerts(other, firing=60)
    page = viewer.get(f"/alerts/?rule={broad.id}&page=2").content.decode()
    group = _group(page, "Broad")
    assert ' open' in group.split(">")[0]  # the group being paged through is open
    assert _targets(group)[0] == "node-0050 GPU 0" and len(_targets(group)) == 50 and "51–100 of 123" in group
    assert f"?rule={broad.id}&amp;page=1#" in group and f"?rule={broad.id}&amp;page=3#" in group
    assert _targets(_group(page, "Other"))[0] == "node-0000 GPU 0"  # other groups stay on their first page
    last = _group(viewer.get(f"/alerts/?rule={broad.id}&page=3").content.decode(), "Broad")
    assert _targets(last)[-3:] == ["node-0120 GPU 0", "node-0121 GPU 0", "node-0122 GPU 0"]
    assert "101–123 of 123" in last and "page=4" not in last  # firing first, then pending
    for page_number, first in (("99", "101–123"), ("0", "1–50"), ("-3", "1–50"), ("x", "1–50")):
        group = _group(viewer.get(f"/alerts/?rule={broad.id}&page={page_number}").content.decode(), "Broad")
        assert f"{first} of 123" in group, page_number
    assert viewer.get(f"/alerts/?rule={other.id + 1000}&page=2").status_code == 200
    assert viewer.get("/alerts/?rule=x&page=2").status_code == 200


def test_the_firing_count_reaches_every_page(viewer_user):
    Rule.objects.all().delete()
    Rule.objects.create(name="Too hot", metric="gpu.temp", comparison=">", threshold=85)
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(("n", UP, [gpu(0, temp=99), gpu(1, temp=99)])), now=T0)
    request = RequestFactory().get("/")
    request.user = viewer_user
    assert firing_alerts(request) == {"firing_alerts": 2}


def test_a_rule_is_created_from_the_rules_page(admin):
    response = admin.post(
        "/alerts/rules/",
        {"name": "Power cap", "metric": "gpu.throttle", "throttle_reason": "sw_power_cap", "comparison": "==",
         "threshold": "1", "for_seconds": "30", "node_glob": "", "severity": "info", "enabled": "on",
         "repeat_interval": "3600"},
    )
    assert response.status_code == 302
    assert Rule.objects.get(name="Power cap").condition_text() == "gpu.throttle[sw_power_cap] == 1 for 30 s"
    page = admin.get("/alerts/rules/").content.decode()
    assert "Power cap" in page and 'id="rule-form"' in page


def test_a_bad_rule_form_shows_the_error(admin):
    response = admin.post("/alerts/rules/", {"name": "x", "metric": "gpu.throttle", "comparison": ">", "threshold": "0",
                                             "for_seconds": "0", "severity": "info", "repeat_interval": "3600"})
    assert response.status_code == 200
    assert "gpu.throttle needs the throttle reason to watch" in response.content.decode()


def test_without_permission_the_pages_are_read_only(viewer):
    page = viewer.get("/alerts/rules/").content.decode()
    assert "GPU temperature high" in page and 'id="rule-form"' not in page
    assert viewer.post("/alerts/rules/", {"name": "x"}).status_code == 403
    rule = Rule.objects.get(name="GPU lost")
    assert viewer.post(f"/alerts/rules/{rule.id}/delete").status_code == 403
    assert viewer.get("/alerts/webhooks/").status_code == 403
    assert viewer.get("/alerts/simulator/").status_code == 403


def test_send_test_delivers_a_signed_event_and_logs_it(admin, receiver, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    response = admin.post("/alerts/webhooks/", {"name": "local", "url": receiver.url + "/in", "format": "slack",
                                                "enabled": "on", "min_severity": "info", "secret": ""})
    endpoint = WebhookEndpoint.objects.get(name="local")
    assert response.status_code == 302
    shown = admin.get(response.url).content.decode()
    assert endpoint.secret in shown  # the generated secret, shown once
    assert endpoint.secret not in admin.get(response.url).content.decode()
    admin.post(f"/alerts/webhooks/{endpoint.id}/test")
    [request] = receiver.wait_for(1)
    headers = request["headers"]
    assert headers["X-Gpulse-Signature"] == signature(endpoint.secret, headers["X-Gpulse-Timestamp"], request["body"])
    logged = DeliveryAttempt.objects.get()
    assert (logged.kind, logged.status_code, logged.outcome) == ("test", 200, "ok")
    page = admin.get(f"/alerts/webhooks/{endpoint.id}/").content.decode()
    assert "Test delivered: HTTP 200" in page and str(logged.event_id) in page


def test_send_test_reports_a_refused_target(admin, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    endpoint = WebhookEndpoint.objects.create(name="meta", url="http://169.254.169.254/")
    response = admin.post(f"/alerts/webhooks/{endpoint.id}/test", follow=True)
    assert "Test failed: refused: 169.254.169.254 is a link-local address" in response.content.decode()


def test_the_simulator_panel_injects_a_fault(admin, redis_client):
    redis_client.hset(Keys().known_nodes, "sim-03", '{"ts": 1.0, "interval": 1.0}')
    assert admin.get("/alerts/simulator/").status_code == 200
    response = admin.post("/alerts/simulator/", {"node": "sim-03", "gpu": "1", "fault": "lost"}, follow=True)
    assert "sim-03 GPU 1: lost injected" in response.content.decode()
    assert redis_client.hget(Keys().simulator_faults, "sim-03/1") == b"lost"
    assert "sim-03/1" in admin.get("/alerts/simulator/").content.decode()


def test_the_simulator_panel_refuses_a_node_the_cluster_never_saw(admin, redis_client):
    response = admin.post("/alerts/simulator/", {"node": "sim-99", "gpu": "0", "fault": "hot"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "the cluster has never seen a node named &#x27;sim-99&#x27;" in page and "hot injected" not in page
    assert not redis_client.exists(Keys().simulator_faults)


def test_the_simulator_help_text_is_text_not_markup(admin):
    page = admin.get("/alerts/simulator/").content.decode()
    assert "xid:&lt;code&gt;" in page and "<code>" not in page.split('id="fault-form"')[1]


def test_the_webhook_form_refuses_a_private_target_saying_how_to_allow_it(admin, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    response = admin.post("/alerts/webhooks/", {"name": "local", "url": "http://127.0.0.1:9/in", "format": "gpulse",
                                                "enabled": "on", "min_severity": "info", "secret": ""})
    assert response.status_code == 200 and not WebhookEndpoint.objects.exists()
    page = response.content.decode()
    assert "refused: 127.0.0.1 is a loopback address" in page
    assert "GPULSE_WEBHOOK_ALLOW_PRIVATE=true" in page and "GPULSE_WEBHOOK_ALLOWED_NETWORKS" in page


def _firing(rule_name, node, notify=True):
    """Fire ``rule_name`` on ``node`` GPU 0 as the evaluator would; return its notification transition."""
    rule = Rule.objects.create(name=rule_name, metric="gpu.temp", comparison=">", threshold=85, node_glob=node)
    if not notify:
        Silence.objects.create(rule=rule, until=timezone.now() + timedelta(hours=1))
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster((node, UP, [gpu(0, temp=99)])), now=time.time())
    return Transition.objects.get(alert__rule=rule)


def _sent(*transitions) -> Notification:
    """Group ``transitions`` (one node's) in a notification, as dispatch and flush leave them."""
    now = timezone.now()
    group = Notification.objects.create(node=transitions[0].alert.node, created=now, updated=now, processed=now)
    Transition.objects.filter(id__in=[t.id for t in transitions]).update(processed=now, notification=group)
    return group


def _attempt(transition, endpoint, number, outcome, error="", alerts=1):
    group = Transition.objects.get(id=transition.id).notification or _sent(transition)
    DeliveryAttempt.objects.create(endpoint=endpoint, notification=group, event_id=group.event_id, alerts=alerts,
                                   kind="firing", attempt=number, outcome=outcome, error=error, duration_ms=3,
                                   status_code=None if error else 200)


def test_the_alerts_page_shows_what_became_of_each_notification(viewer):
    Rule.objects.all().delete()
    ops = WebhookEndpoint.objects.create(name="ops", url="https://hooks.example.com/a")
    chat = WebhookEndpoint.objects.create(name="chat", url="https://hooks.example.com/b")
    delivered = _firing("delivered", "n1")
    _attempt(delivered, ops, 1, DeliveryAttempt.RETRY, "HTTP 503")
    _attempt(delivered, ops, 2, DeliveryAttempt.OK)
    _attempt(delivered, chat, 1, DeliveryAttempt.FAILED, "refused: 10.0.0.1 is a private address")
    retrying = _firing("retrying", "n2")
    _attempt(retrying, ops, 1, DeliveryAttempt.RETRY, "HTTP 503")
    _attempt(_firing("gave up", "n3"), ops, 5, DeliveryAttempt.GAVE_UP, "timed out")
    _firing("silenced", "n4", notify=False)
    page = viewer.get("/alerts/").content.decode()
    rows = {rule: _group(page, rule).split("<tbody>")[1] for rule in ("delivered", "retrying", "gave up", "silenced")}
    assert "ops: ok" in rows["delivered"] and "chat: failed" in rows["delivered"]
    assert "refused: 10.0.0.1 is a private address" in rows["delivered"]
    assert "ops: retrying" in rows["retrying"] and "ops: gave up" in rows["gave up"]
    assert "silenced" in rows["silenced"] and not any(">yes<" in row for row in rows.values())
    WebhookEndpoint.objects.all().delete()
    assert "no webhook" in _group(viewer.get("/alerts/").content.decode(), "delivered")


def test_an_alert_shows_the_deliveries_of_its_group_that_carried_it_and_how_many_alerts_they_had(viewer, admin):
    Rule.objects.all().delete()
    ops = WebhookEndpoint.objects.create(name="ops", url="https://hooks.example.com/a")
    pager = WebhookEndpoint.objects.create(name="pager", url="https://hooks.example.com/b", min_severity="critical")
    Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=85, severity="warning")
    Rule.objects.create(name="xid", metric="gpu.xid", comparison="==", threshold=79, severity="critical")
    AlertEvaluator(enqueue=lambda ids: None).evaluate(cluster(("n1", UP, [gpu(0, temp=99, xid=[79])])),
                                                      now=time.time())
    hot, xid = (Transition.objects.get(alert__rule__name=name) for name in ("hot", "xid"))
    _sent(hot, xid)
    _attempt(hot, ops, 1, DeliveryAttempt.OK, alerts=2)
    _attempt(xid, pager, 1, DeliveryAttempt.OK)
    page = viewer.get("/alerts/").content.decode()
    hot_row, xid_row = (_group(page, rule).split("<tbody>")[1] for rule in ("hot", "xid"))
    assert "ops: ok" in hot_row and "pager:" not in hot_row  # the pager's delivery carried the Xid only
    assert "ops: ok" in xid_row and "pager: ok" in xid_row
    assert hot_row.count("(one delivery of 2 alerts)") == 1
    log = admin.get("/alerts/webhooks/").content.decode().split('id="delivery-log"')[1]
    assert "<th class=\"num\">Alerts</th>" in log
    assert [row.split('<td class="num">')[1].split("<")[0] for row in log.split("<tr class=")[1:]] == ["1", "2"]


def test_the_alerts_page_reads_deliveries_in_a_fixed_number_of_queries(viewer):
    Rule.objects.all().delete()
    ops = WebhookEndpoint.objects.create(name="ops", url="https://hooks.example.com/a")
    _attempt(_firing("one", "n1"), ops, 1, DeliveryAttempt.OK)
    with CaptureQueriesContext(connection) as one_alert:
        viewer.get("/alerts/")
    for n in range(2, 7):
        _attempt(_firing(f"rule {n}", f"n{n}"), ops, 1, DeliveryAttempt.FAILED, "HTTP 404")
    with CaptureQueriesContext(connection) as six_alerts:
        viewer.get("/alerts/")
    assert len(six_alerts) == len(one_alert)


def test_a_silence_is_created_from_the_alerts_page(admin):
    response = admin.post(
        "/alerts/silences/", {"node_glob": "gpu-0*", "minutes": "90", "comment": "reboot"}, follow=True
    )
    page = response.content.decode()
    assert "Silenced node gpu-0* until" in page and "reboot" in page.split('id="silences"')[1]


def test_without_the_permission_an_id_is_403_whether_it_exists_or_not(viewer):
    rule = Rule.objects.get(name="GPU lost")
    endpoint = WebhookEndpoint.objects.create(name="ops", url="https://hooks.example.com/gpulse")
    silence = Silence.objects.create(node_glob="gpu-01", until=timezone.now() + timedelta(hours=1))
    for existing, path in ((rule.id, "rules/{}/"), (rule.id, "rules/{}/delete"), (endpoint.id, "webhooks/{}/"),
                           (endpoint.id, "webhooks/{}/delete"), (endpoint.id, "webhooks/{}/test"),
                           (silence.id, "silences/{}/expire")):
        for pk in (existing, existing + 1000):
            url = "/alerts/" + path.format(pk)
            assert viewer.post(url, {"name": "x"}).status_code == 403, url
    assert viewer.get(f"/alerts/webhooks/{endpoint.id + 1000}/").status_code == 403


@pytest.mark.timeout(30)  # without a deadline the page would wait for ever
def test_send_test_ends_within_the_deadline_on_a_trickling_receiver(admin, misbehaving, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_TIMEOUT = DEADLINE
    endpoint = WebhookEndpoint.objects.create(name="slow", url=misbehaving("trickle").url)
    started = time.monotonic()
    # In this thread: the test database's transaction is not visible to others.
    response = admin.post(f"/alerts/webhooks/{endpoint.id}/test")
    assert time.monotonic() - started < DEADLINE + 2 * SLACK
    logged = DeliveryAttempt.objects.get(endpoint=endpoint)
    assert logged.outcome == DeliveryAttempt.GAVE_UP and logged.duration_ms < (DEADLINE + SLACK) * 1000
    assert f"Test failed: timed out after {DEADLINE:g} s (127.0.0.1)" in admin.get(response.url).content.decode()
