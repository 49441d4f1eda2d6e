"""One signed delivery attempt and the payload formats, against a real local receiver."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from dashboard.alerts import delivery
from dashboard.alerts.formats import FORMATS, ZERO_TIME, Event
from dashboard.alerts.models import FORMATS as FORMAT_CHOICES
from dashboard.alerts.models import DeliveryAttempt, WebhookEndpoint
from tests.test_webhook_outbound import receiver  # noqa: F401  (fixture)

SECRET = "s3cret-never-logged"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "webhook-signature.md"


def readme_verify():
    """Return the verify() function from the documented snippet, so the docs are tested too."""
    code = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    namespace = {}
    exec(code, namespace)
    return namespace["verify"]


def alert_event(kind="firing", gpu=3) -> Event:
    start = datetime(2025, 11, 24, 16, 0, tzinfo=UTC)
    return Event(
        event_id=uuid.uuid4(),
        kind=kind,
        rule_id=7,
        rule_name="GPU temperature high",
        condition="gpu.temp > 85 for 60 s",
        severity="critical",
        node="gpu-01",
        gpu=gpu,
        value=91.0 if kind != "resolved" else 70.0,
        fingerprint="0123456789abcdef",
        reason="held 60 s",
        starts_at=start,
        ends_at=start + timedelta(minutes=5) if kind == "resolved" else None,
        created=start,
    )


@pytest.fixture
def allow_private(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True


def test_a_delivery_is_signed_as_the_readme_says(receiver, allow_private):  # noqa: F811
    event = alert_event()
    result = delivery.send(receiver.url, SECRET, "gpulse", event, receiver="ops")
    assert result.ok and result.status_code == 200
    [request] = receiver.wait_for(1)
    headers = request["headers"]
    assert headers["X-Gpulse-Event"] == str(event.event_id)
    assert headers["X-Gpulse-Signature"] == delivery.signature(SECRET, headers["X-Gpulse-Timestamp"], request["body"])
    verify = readme_verify()
    assert verify(SECRET, headers, request["body"])
    assert not verify("wrong secret", headers, request["body"])
    assert not verify(SECRET, headers, request["body"] + b" ")
    assert orjson.loads(request["body"])["event_id"] == str(event.event_id)


@pytest.mark.parametrize(
    "status, outcome",
    [(200, "ok"), (204, "ok"), (500, "retry"), (503, "retry"), (429, "retry"), (400, "failed"), (404, "failed"), (410, "failed")],
)
def test_the_answer_decides_whether_to_retry(receiver, allow_private, status, outcome):  # noqa: F811
    receiver.answer(status)
    result = delivery.send(receiver.url, SECRET, "slack", alert_event(), receiver="ops")
    assert (result.outcome, result.status_code) == (outcome, status)
    if outcome != "ok":
        assert result.error.startswith(f"HTTP {status}")


def test_a_refused_target_fails_permanently_with_the_reason(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    result = delivery.send("http://10.0.0.1/hook", SECRET, "gpulse", alert_event(), receiver="ops")
    assert result.outcome == "failed" and result.status_code is None
    assert result.error.startswith("refused: 10.0.0.1 is a private address")


def test_an_unreachable_receiver_is_retried(allow_private):
    result = delivery.send("http://127.0.0.1:1/", SECRET, "gpulse", alert_event(), receiver="ops")
    assert result.outcome == "retry" and "connection to 127.0.0.1:1 failed" in result.error


@pytest.mark.django_db
def test_each_attempt_is_logged_without_the_secret(receiver, allow_private):  # noqa: F811
    endpoint = WebhookEndpoint.objects.create(name="ops", url=receiver.url, secret=SECRET, format="alertmanager")
    receiver.answer(500)
    event = alert_event()
    first = delivery.attempt(endpoint, event, 1)
    second = delivery.attempt(endpoint, event, 2)
    assert [(a.attempt, a.status_code, a.outcome) for a in (first, second)] == [(1, 500, "retry"), (2, 200, "ok")]
    assert first.duration_ms > 0 and first.event_id == second.event_id == event.event_id
    for row in DeliveryAttempt.objects.values():
        assert SECRET not in repr(row)


def test_alertmanager_payload_follows_webhook_v4(settings):
    settings.GPULSE_EXTERNAL_URL = "https://gpulse.example.com/"
    firing = orjson.loads(FORMATS["alertmanager"].render(alert_event("firing"), "ops"))
    assert firing["version"] == "4" and firing["status"] == "firing" and firing["receiver"] == "ops"
    assert firing["groupLabels"] == {"alertname": "GPU temperature high"}
    assert firing["commonLabels"] == {"alertname": "GPU temperature high", "node": "gpu-01", "gpu": "3", "severity": "critical"}
    assert firing["externalURL"] == "https://gpulse.example.com"
    assert firing["groupKey"].startswith('{}:{alertname="GPU temperature high"}')
    [alert] = firing["alerts"]
    assert alert["status"] == "firing" and alert["fingerprint"] == "0123456789abcdef"
    assert alert["startsAt"] == "2025-11-24T16:00:00.000Z" and alert["endsAt"] == ZERO_TIME
    assert alert["annotations"]["summary"] == "GPU temperature high on gpu-01 GPU 3"
    assert "gpu.temp > 85" in alert["annotations"]["description"]
    assert alert["generatorURL"] == "https://gpulse.example.com/alerts/"
    resolved = orjson.loads(FORMATS["alertmanager"].render(alert_event("resolved", gpu=None), "ops"))
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] == "2025-11-24T16:05:00.000Z"
    assert "gpu" not in resolved["alerts"][0]["labels"]


def test_slack_and_gpulse_payloads():
    slack = orjson.loads(FORMATS["slack"].render(alert_event("repeat"), "ops"))
    assert list(slack) == ["text"]
    assert slack["text"].startswith("[STILL FIRING] GPU temperature high on gpu-01 GPU 3 (critical)")
    native = orjson.loads(FORMATS["gpulse"].render(alert_event("resolved"), "ops"))
    assert (native["kind"], native["status"], native["alert"]["gpu"], native["alert"]["value"]) == ("resolved", "resolved", 3, 70.0)
    assert native["alert"]["ends_at"] == "2025-11-24T16:05:00.000Z"


def test_every_format_choice_has_a_renderer():
    assert {name for name, _ in FORMAT_CHOICES} == set(FORMATS)
