"""One signed delivery attempt and the payload formats, against a real local receiver."""

import re
import uuid
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from dashboard.alerts import delivery
from dashboard.alerts.formats import FORMATS, ZERO_TIME, Event, EventAlert
from dashboard.alerts.models import FORMATS as FORMAT_CHOICES
from dashboard.alerts.models import DeliveryAttempt, Notification, Transition, WebhookEndpoint

SECRET = "s3cret-never-logged"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "webhook-signature.md"


def readme_verify():
    """Return the verify() function from the documented snippet, so the docs are tested too."""
    code = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    namespace = {}
    exec(code, namespace)
    return namespace["verify"]


START = datetime(2025, 11, 24, 16, 0, tzinfo=UTC)


def an_alert(kind="firing", gpu=3, rule_name="GPU temperature high", reason="held 60 s", node="gpu-01",
             severity="critical") -> EventAlert:
    return EventAlert(
        kind=kind,
        rule_id=7,
        rule_name=rule_name,
        condition="gpu.temp > 85 for 60 s",
        severity=severity,
        node=node,
        gpu=gpu,
        value=91.0 if kind != "resolved" else 70.0,
        fingerprint=f"0123456789abcd{gpu or 0:02d}",
        reason=reason,
        starts_at=START,
        ends_at=START + timedelta(minutes=5) if kind == "resolved" else None,
    )


def group_event(*alerts: EventAlert) -> Event:
    return Event(event_id=uuid.uuid4(), node=alerts[0].node, alerts=alerts, created=START)


def alert_event(kind="firing", **alert) -> Event:
    """A notification of one alert."""
    return group_event(an_alert(kind, **alert))


@pytest.fixture
def allow_private(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True


def test_a_delivery_is_signed_as_the_readme_says(receiver, allow_private):
    event = alert_event()
    result = delivery.send(receiver.url, SECRET, "gpulse", event, receiver="ops")
    assert result.ok and result.status_code == 200
    [request] = receiver.wait_for(1)
    headers = request["headers"]
    assert headers["X-Gpulse-Event"] == str(event.event_id)
    assert headers["X-Gpulse-Signature"] == delivery.signature(SECRET, headers["X-Gpulse-Timestamp"], request["body"])
    verify = readme_verify()
    assert not verify("wrong secret", headers, request["body"], {})
    assert not verify(SECRET, headers, request["body"] + b" ", {})
    seen: dict = {}
    assert verify(SECRET, headers, request["body"], seen)
    assert not verify(SECRET, headers, request["body"], seen), "the same delivery again is a replay"
    body = orjson.loads(request["body"])
    assert body["event_id"] == str(event.event_id)
    # The delivery id is inside the signed body, the header says the same.
    assert body["delivery_id"] == headers["X-Gpulse-Delivery"] and uuid.UUID(body["delivery_id"])


@pytest.mark.parametrize(
    "status, outcome",
    [
        (200, "ok"), (204, "ok"), (500, "retry"), (503, "retry"), (429, "retry"),
        (400, "failed"), (404, "failed"), (410, "failed"),
    ],
)
def test_the_answer_decides_whether_to_retry(receiver, allow_private, status, outcome):
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
def test_each_attempt_is_logged_without_the_secret(receiver, allow_private):
    endpoint = WebhookEndpoint.objects.create(name="ops", url=receiver.url, secret=SECRET, format="alertmanager")
    receiver.answer(500)
    event = alert_event()
    first = delivery.attempt(endpoint, event, 1)
    second = delivery.attempt(endpoint, event, 2)
    assert [(a.attempt, a.status_code, a.outcome) for a in (first, second)] == [(1, 500, "retry"), (2, 200, "ok")]
    assert first.duration_ms > 0 and first.event_id == second.event_id == event.event_id
    for row in DeliveryAttempt.objects.values():
        assert SECRET not in repr(row)


# Alertmanager's webhook model, field by field from its Go source:
# notify/webhook/webhook.go  type Message struct { *template.Data; Version string `json:"version"`;
#                              GroupKey string `json:"groupKey"`; TruncatedAlerts uint64 `json:"truncatedAlerts"` }
# template/template.go       type Data struct { Receiver string `json:"receiver"`; Status string `json:"status"`;
#                              Alerts Alerts `json:"alerts"`; GroupLabels, CommonLabels, CommonAnnotations KV
#                              (`json:"groupLabels"` ...); ExternalURL string `json:"externalURL"` }
#                            type Alert struct { Status string; Labels, Annotations KV; StartsAt, EndsAt time.Time;
#                              GeneratorURL string; Fingerprint string }  (json: status, labels, annotations,
#                              startsAt, endsAt, generatorURL, fingerprint); type KV map[string]string
GO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


def go_kv(value) -> dict:
    assert isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return value


def go_time_value(value) -> str:
    """A time.Time as Go marshals it: RFC 3339 in UTC, the fraction without trailing zeros."""
    assert isinstance(value, str) and GO_TIME.fullmatch(value), value
    assert not value.endswith("0Z") or "." not in value, f"Go drops the fraction's trailing zeros: {value}"
    datetime.fromisoformat(value)
    return value


def go_string(value) -> str:
    assert isinstance(value, str)
    return value


def go_uint64(value) -> int:
    assert isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64
    return value


@dataclass
class AmAlert:
    status: str
    labels: dict
    annotations: dict
    startsAt: str
    endsAt: str
    generatorURL: str
    fingerprint: str


@dataclass
class AmMessage:
    receiver: str
    status: str
    alerts: list
    groupLabels: dict
    commonLabels: dict
    commonAnnotations: dict
    externalURL: str
    version: str
    groupKey: str
    truncatedAlerts: int


TYPES = {"status": go_string, "labels": go_kv, "annotations": go_kv, "startsAt": go_time_value,
         "endsAt": go_time_value, "generatorURL": go_string, "fingerprint": go_string, "receiver": go_string,
         "groupLabels": go_kv, "commonLabels": go_kv, "commonAnnotations": go_kv, "externalURL": go_string,
         "version": go_string, "groupKey": go_string, "truncatedAlerts": go_uint64}


def decode(model, data: dict):
    """Decode as Go would, refusing what Go would silently drop (an unknown field) or zero (a missing one)."""
    names = [f.name for f in fields(model)]
    assert sorted(data) == sorted(names), f"{model.__name__}: fields {sorted(data)} are not {sorted(names)}"
    values = {name: TYPES[name](data[name]) for name in names if name != "alerts"}
    if "alerts" in names:
        assert isinstance(data["alerts"], list)
        values["alerts"] = [decode(AmAlert, alert) for alert in data["alerts"]]
    return model(**values)


def encode(message) -> dict:
    out = {f.name: getattr(message, f.name) for f in fields(message)}
    if "alerts" in out:
        out["alerts"] = [encode(alert) for alert in out["alerts"]]
    return out


def alertmanager_message(event: Event) -> dict:
    payload = orjson.loads(FORMATS["alertmanager"].render(event, "ops"))
    assert encode(decode(AmMessage, payload)) == payload  # round-trips through the model
    assert payload["status"] in ("firing", "resolved")
    return payload


def test_alertmanager_payload_follows_webhook_v4(settings):
    settings.GPULSE_EXTERNAL_URL = "https://gpulse.example.com/"
    firing = alertmanager_message(alert_event("firing"))
    assert firing["version"] == "4" and firing["status"] == "firing" and firing["receiver"] == "ops"
    assert firing["groupLabels"] == {"node": "gpu-01"}
    assert firing["commonLabels"] == {
        "alertname": "GPU temperature high", "node": "gpu-01", "gpu": "3", "severity": "critical",
    }
    assert firing["externalURL"] == "https://gpulse.example.com"
    assert firing["groupKey"] == '{}:{node="gpu-01"}'  # a route's key, then its group_by [node] labels
    [alert] = firing["alerts"]
    assert alert["status"] == "firing" and alert["fingerprint"] == "0123456789abcd03"
    assert alert["startsAt"] == "2025-11-24T16:00:00Z" and alert["endsAt"] == ZERO_TIME
    assert alert["annotations"]["summary"] == "GPU temperature high on gpu-01 GPU 3"
    assert "gpu.temp > 85" in alert["annotations"]["description"]
    assert alert["generatorURL"] == "https://gpulse.example.com/alerts/"
    resolved = alertmanager_message(alert_event("resolved", gpu=None))
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] == "2025-11-24T16:05:00Z"
    assert "gpu" not in resolved["alerts"][0]["labels"]


def test_alertmanager_group_key_quotes_label_values_as_go_does(settings):
    settings.GPULSE_EXTERNAL_URL = "https://gpulse.example.com"
    message = alertmanager_message(alert_event(node='say "hot" \\ now\n'))
    assert message["groupKey"] == r'{}:{node="say \"hot\" \\ now\n"}'
    assert message["groupLabels"] == {"node": 'say "hot" \\ now\n'}


def test_alertmanager_sends_a_group_with_the_labels_and_annotations_its_alerts_share(settings):
    settings.GPULSE_EXTERNAL_URL = ""
    event = group_event(*(an_alert(gpu=gpu, reason="Xid 79") for gpu in range(8)),
                        an_alert("resolved", gpu=None, rule_name="Node failing"))
    message = alertmanager_message(event)
    assert message["status"] == "firing" and message["truncatedAlerts"] == 0  # firing while any alert fires
    assert [a["labels"].get("gpu") for a in message["alerts"]] == [*map(str, range(8)), None]
    assert message["alerts"][-1]["status"] == "resolved"
    # As Alertmanager's template.Data: the pairs every alert has, with the same value.
    assert message["commonLabels"] == {"node": "gpu-01", "severity": "critical"}
    assert message["commonAnnotations"] == {}
    eight = alertmanager_message(group_event(*(an_alert(gpu=gpu) for gpu in range(8))))
    assert eight["commonLabels"] == {"alertname": "GPU temperature high", "node": "gpu-01", "severity": "critical"}
    assert set(eight["commonAnnotations"]) == {"description"}
    resolved = alertmanager_message(group_event(an_alert("resolved", gpu=1), an_alert("resolved", gpu=2)))
    assert resolved["status"] == "resolved"


def test_alertmanager_urls_are_empty_not_relative_without_an_external_url(settings):
    settings.GPULSE_EXTERNAL_URL = ""
    message = alertmanager_message(alert_event())
    assert message["externalURL"] == "" and message["alerts"][0]["generatorURL"] == ""


def test_go_time_keeps_only_the_significant_fraction(settings):
    event = group_event(replace(an_alert(), starts_at=datetime(2025, 11, 24, 16, 0, 1, 250000, tzinfo=UTC)))
    assert alertmanager_message(event)["alerts"][0]["startsAt"] == "2025-11-24T16:00:01.25Z"


def test_slack_escapes_names_so_channel_mentions_do_not_ping(settings):
    settings.GPULSE_EXTERNAL_URL = ""
    event = alert_event(rule_name="<!channel> & <@U024BE7LH>", reason="gpu.temp > 85 for 60 s (now 91), held 60 s")
    raw = FORMATS["slack"].render(event, "ops")
    assert b"<!" not in raw and b"<@" not in raw
    slack = orjson.loads(raw)
    assert slack["text"].startswith("[FIRING] &lt;!channel&gt; &amp; &lt;@U024BE7LH&gt; on gpu-01 GPU 3 (critical)")
    assert slack["text"].count("gpu.temp &gt; 85") == 1  # the condition once, not twice
    [section] = slack["blocks"]  # no button without an address to link to
    assert section["text"]["type"] == "mrkdwn" and "&lt;!channel&gt;" in section["text"]["text"]


def test_slack_links_to_the_alerts_page_when_gpulse_has_an_external_url(settings):
    settings.GPULSE_EXTERNAL_URL = "https://gpulse.example.com/"
    slack = orjson.loads(FORMATS["slack"].render(alert_event("repeat"), "ops"))
    assert slack["text"].startswith("[STILL FIRING] GPU temperature high on gpu-01 GPU 3 (critical)")
    section, actions = slack["blocks"]
    assert section["text"]["text"].startswith("*[STILL FIRING] GPU temperature high on gpu-01 GPU 3 (critical)*\n")
    [button] = actions["elements"]
    assert button["type"] == "button" and button["url"] == "https://gpulse.example.com/alerts/"
    assert button["text"] == {"type": "plain_text", "text": "Open in gpulse"}


def test_gpulse_payload():
    native = orjson.loads(FORMATS["gpulse"].render(alert_event("resolved"), "ops"))
    assert native["version"] == 2 and native["group"] == {"node": "gpu-01"}
    assert (native["kind"], native["status"]) == ("resolved", "resolved")
    [alert] = native["alerts"]
    assert (alert["gpu"], alert["value"], alert["kind"], alert["status"]) == (3, 70.0, "resolved", "resolved")
    assert alert["ends_at"] == "2025-11-24T16:05:00.000Z"


def test_a_group_is_firing_while_any_alert_fires_and_its_kind_is_the_most_pressing():
    mixed = group_event(an_alert("resolved", gpu=1), an_alert("repeat", gpu=2), an_alert("firing", gpu=3))
    native = orjson.loads(FORMATS["gpulse"].render(mixed, "ops"))
    assert (native["kind"], native["status"]) == ("firing", "firing")
    assert [(a["gpu"], a["status"]) for a in native["alerts"]] == [(1, "resolved"), (2, "firing"), (3, "firing")]
    assert group_event(an_alert("resolved", gpu=1), an_alert("repeat", gpu=2)).kind == "repeat"


def test_slack_lists_a_groups_alerts_under_one_headline_and_caps_them(settings):
    settings.GPULSE_EXTERNAL_URL = ""
    three = orjson.loads(FORMATS["slack"].render(
        group_event(an_alert(gpu=0, rule_name="<!here>"), an_alert(gpu=1, severity="warning"),
                    an_alert("resolved", gpu=2, severity="info")), "ops"))
    headline, *lines = three["blocks"]
    assert headline["text"]["text"] == "*[FIRING] 3 alerts on gpu-01 (critical)*"
    assert [line["text"]["text"].split(":")[0] for line in lines] == [
        "[FIRING] &lt;!here&gt; on gpu-01 GPU 0 (critical)", "[FIRING] GPU temperature high on gpu-01 GPU 1 (warning)",
        "[RESOLVED] GPU temperature high on gpu-01 GPU 2 (info)"]
    assert three["text"].startswith("[FIRING] 3 alerts on gpu-01 (critical)\n[FIRING] &lt;!here&gt;")
    # A group of 1,000 alerts with the longest names a rule and a node may have, all of them "&".
    long_names = {"rule_name": "&" * 100, "node": "&" * 200, "reason": "&" * 300}
    big = FORMATS["slack"].render(group_event(*(an_alert(gpu=gpu, **long_names) for gpu in range(1000))), "ops")
    slack = orjson.loads(big)
    assert slack["blocks"][-1]["text"]["text"] == "and 980 more" and len(slack["blocks"]) <= 50
    assert all(len(block["text"]["text"]) <= 3000 for block in slack["blocks"])
    assert len(slack["text"]) <= 40_000 and "&amp" not in slack["text"].replace("&amp;", "")


def test_every_format_choice_has_a_renderer():
    assert {name for name, _ in FORMAT_CHOICES} == set(FORMATS)


# Webhook replay (issue 31): a delivery has an id in its signed part, and a task sends only what the database says.


def flushed(transition_id: int, node: str = "gpu-01") -> Notification:
    """Put a transition in a group of its own, as dispatch and flush leave it; return the group."""
    now = datetime.now(UTC)
    group = Notification.objects.create(node=node, created=now, updated=now, processed=now)
    Transition.objects.filter(id=transition_id).update(processed=now, notification=group)
    return group


@pytest.fixture
def dispatched(db, receiver, allow_private, redis_client, monkeypatch):
    """A firing transition's notification as flush leaves it, two gpulse endpoints, and the re-queued attempts
    recorded instead of sent to a worker."""
    from dashboard.alerts import tasks
    from tests.test_webhook_worker import a_transition

    group = flushed(a_transition().id)
    ops = WebhookEndpoint.objects.create(name="ops", url=receiver.url + "/ops", secret=SECRET, format="gpulse")
    other = WebhookEndpoint.objects.create(name="other", url=receiver.url + "/other", secret=SECRET, format="gpulse")
    queued: list = []
    monkeypatch.setattr(tasks.deliver, "apply_async", lambda args, **kwargs: queued.append(args))
    return group, ops, other, queued


def run_deliver(*args, **kwargs):
    from dashboard.alerts import tasks

    return tasks.deliver.apply(args=args, kwargs=kwargs).get()


def test_a_retry_keeps_its_delivery_id_and_another_endpoint_gets_another(receiver, dispatched):
    group, ops, other, queued = dispatched
    receiver.answer(500)
    assert run_deliver(group.id, ops.id, 1) == "retry" and queued == [(group.id, ops.id, 2)]
    assert run_deliver(group.id, ops.id, 2) == "ok"
    assert run_deliver(group.id, other.id, 1) == "ok"
    first, retry, elsewhere = receiver.wait_for(3)
    ids = [r["headers"]["X-Gpulse-Delivery"] for r in (first, retry, elsewhere)]
    assert ids[0] == ids[1] != ids[2]
    assert [orjson.loads(r["body"])["delivery_id"] for r in (first, retry, elsewhere)] == ids
    assert ids[0] == str(delivery.delivery_id(group.event_id, ops.id))
    assert delivery.delivery_id(uuid.uuid4(), ops.id) != delivery.delivery_id(group.event_id, ops.id)


def test_a_task_pushed_again_after_the_delivery_sends_nothing(receiver, dispatched):
    group, ops, _, _ = dispatched
    assert run_deliver(group.id, ops.id) == "ok"
    # A node with the broker's credential replayed this 15 times, each freshly signed (issue 31).
    for number in (1, 2, 5):
        assert run_deliver(group.id, ops.id, number) == "done"
    assert len(receiver.requests) == 1


def test_a_task_for_a_notification_never_flushed_to_the_endpoint_sends_nothing(receiver, dispatched):
    group, ops, _, _ = dispatched
    Notification.objects.filter(id=group.id).update(processed=None)
    assert run_deliver(group.id, ops.id) == "refused"  # flush never claimed it
    Notification.objects.filter(id=group.id).update(processed=datetime.now(UTC))
    group.transitions.update(notify=False)
    assert run_deliver(group.id, ops.id) == "refused"  # it notifies no one
    group.transitions.update(notify=True)
    WebhookEndpoint.objects.filter(id=ops.id).update(min_severity="critical")
    assert run_deliver(group.id, ops.id) == "refused"  # the endpoint wants none of its alerts (a warning)
    assert run_deliver(group.id + 1000, ops.id) == "gone"
    assert receiver.requests == []


def test_a_forged_state_in_the_task_is_refused_and_the_database_state_is_what_goes_out(receiver, dispatched):
    group, ops, _, _ = dispatched
    with pytest.raises(TypeError):
        run_deliver(group.id, ops.id, kind="resolved")
    with pytest.raises(TypeError):
        run_deliver(group.id, ops.id, 1, "resolved")
    assert receiver.requests == []
    assert run_deliver(group.id, ops.id) == "ok"
    [request] = receiver.wait_for(1)
    body = orjson.loads(request["body"])
    assert (body["kind"], body["status"], body["event_id"]) == ("firing", "firing", str(group.event_id))
    assert [a["status"] for a in body["alerts"]] == ["firing"]
