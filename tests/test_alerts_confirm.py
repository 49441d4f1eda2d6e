"""Deleting a rule or a webhook, or expiring a silence, asks first and says what goes with it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.models import DeliveryAttempt, Rule, Silence, WebhookEndpoint
from dashboard.live.templatetags.local_time import local_time
from tests.test_alerts_pages import _active_alerts

pytestmark = pytest.mark.django_db


def _question(response) -> str:
    assert response.status_code == 200
    return response.content.decode().split("<main")[1].split("</main>")[0]


def test_deleting_a_rule_asks_first_saying_what_goes_with_it(operator):
    rule = Rule.objects.create(name="Broad <b>", metric="gpu.temp", comparison=">", threshold=85)
    _active_alerts(rule, firing=3, pending=1)
    Silence.objects.create(rule=rule, until=timezone.now() + timedelta(hours=1))
    edit = operator.get(f"/alerts/rules/{rule.id}/").content.decode()
    # The rule's page links to the question; no form there deletes.
    assert f'href="/alerts/rules/{rule.id}/delete"' in edit and f'action="/alerts/rules/{rule.id}/delete"' not in edit
    question = _question(operator.get(f"/alerts/rules/{rule.id}/delete"))
    assert "Delete rule “Broad &lt;b&gt;”?" in question and "<b>" not in question
    assert "4 alerts (3 firing, 1 pending) and their history" in question and "1 silence of this rule" in question
    assert 'method="post"' in question and "csrfmiddlewaretoken" in question
    assert Rule.objects.filter(pk=rule.pk).exists()
    response = operator.post(f"/alerts/rules/{rule.id}/delete")
    assert response.status_code == 302 and not Rule.objects.filter(pk=rule.pk).exists()


def test_deleting_a_webhook_asks_first_saying_what_goes_with_it(admin):
    endpoint = WebhookEndpoint.objects.create(name="ops", url="https://hooks.example.com/a")
    for n in (1, 2):
        DeliveryAttempt.objects.create(endpoint=endpoint, event_id="0" * 32, kind="test", attempt=n,
                                       outcome=DeliveryAttempt.OK, duration_ms=3)
    edit = admin.get(f"/alerts/webhooks/{endpoint.id}/").content.decode()
    assert f'href="/alerts/webhooks/{endpoint.id}/delete"' in edit
    assert f'action="/alerts/webhooks/{endpoint.id}/delete"' not in edit
    question = _question(admin.get(f"/alerts/webhooks/{endpoint.id}/delete"))
    assert "Delete webhook “ops”?" in question and "its delivery log (2 attempts)" in question
    assert WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    admin.post(f"/alerts/webhooks/{endpoint.id}/delete")
    assert not WebhookEndpoint.objects.exists() and not DeliveryAttempt.objects.exists()


def test_expiring_a_silence_asks_first_saying_what_it_ends(admin):
    silence = Silence.objects.create(node_glob="gpu-0*", comment="rack 4", until=timezone.now() + timedelta(hours=1))
    page = admin.get("/alerts/").content.decode().split('id="silences"')[1].split("</table>")[0]
    assert f'href="/alerts/silences/{silence.id}/expire"' in page and "<form" not in page
    question = _question(admin.get(f"/alerts/silences/{silence.id}/expire"))
    assert "Expire the silence of node gpu-0*?" in question
    assert f"until {local_time(silence.until, 'minute')}: what it mutes notifies again" in question
    silence.refresh_from_db()
    assert silence.until > timezone.now()
    admin.post(f"/alerts/silences/{silence.id}/expire")
    silence.refresh_from_db()
    assert silence.until <= timezone.now()
    # Expired already: nothing left to ask about.
    assert admin.get(f"/alerts/silences/{silence.id}/expire").status_code == 404


def test_without_the_permission_the_question_is_403_too(viewer):
    rule = Rule.objects.get(name="GPU lost")
    silence = Silence.objects.create(node_glob="gpu-01", until=timezone.now() + timedelta(hours=1))
    for url in (f"/alerts/rules/{rule.id}/delete", f"/alerts/rules/{rule.id + 1000}/delete",
                f"/alerts/silences/{silence.id}/expire", "/alerts/webhooks/1/delete"):
        assert viewer.get(url).status_code == 403, url
