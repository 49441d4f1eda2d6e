"""Payload formats for webhook endpoints: one small class per format, in a registry."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from django.conf import settings

from dashboard.alerts.models import FIRING, RESOLVED, Transition

# Alertmanager's "no end yet" timestamp: Go's zero time.
ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True)
class Event:
    """One notification: what a receiver is told, whatever the format."""

    event_id: uuid.UUID
    kind: str  # firing, resolved, repeat or test
    rule_id: int | None
    rule_name: str
    condition: str
    severity: str
    node: str
    gpu: int | None
    value: float | None
    fingerprint: str
    reason: str
    starts_at: datetime
    ends_at: datetime | None
    created: datetime

    @property
    def status(self) -> str:
        return RESOLVED if self.kind == RESOLVED else FIRING

    @property
    def target(self) -> str:
        return self.node if self.gpu is None else f"{self.node} GPU {self.gpu}"

    @property
    def summary(self) -> str:
        return f"{self.rule_name} on {self.target}"

    @property
    def description(self) -> str:
        value = "no value" if self.value is None else f"value {self.value:g}"
        return f"{self.condition} ({value}): {self.reason}"

    @classmethod
    def from_transition(cls, transition: Transition) -> "Event":
        alert = transition.alert
        rule = alert.rule
        return cls(
            event_id=transition.event_id,
            kind=transition.kind,
            rule_id=rule.id,
            rule_name=rule.name,
            condition=rule.condition_text(),
            severity=rule.severity,
            node=alert.node,
            gpu=alert.gpu,
            value=transition.value,
            fingerprint=alert.fingerprint,
            reason=transition.reason,
            starts_at=alert.fired_at or transition.created,
            ends_at=transition.created if transition.new == RESOLVED else None,
            created=transition.created,
        )

    @classmethod
    def test(cls, now: datetime | None = None) -> "Event":
        now = now or datetime.now(UTC)
        return cls(
            event_id=uuid.uuid4(),
            kind="test",
            rule_id=None,
            rule_name="gpulse test event",
            condition="test",
            severity="info",
            node="test-node",
            gpu=0,
            value=None,
            fingerprint="0000000000000000",
            reason="a test sent from gpulse; no action needed",
            starts_at=now,
            ends_at=None,
            created=now,
        )


def rfc3339(moment: datetime | None) -> str:
    if moment is None:
        return ZERO_TIME
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def external_url() -> str:
    return settings.GPULSE_EXTERNAL_URL.rstrip("/")


class Format:
    name = ""
    content_type = "application/json"

    def render(self, event: Event, receiver: str) -> bytes:
        raise NotImplementedError


class GpulseFormat(Format):
    name = "gpulse"

    def render(self, event, receiver):
        return orjson.dumps(
            {
                "version": 1,
                "event_id": str(event.event_id),
                "kind": event.kind,
                "status": event.status,
                "receiver": receiver,
                "alert": {
                    "fingerprint": event.fingerprint,
                    "rule_id": event.rule_id,
                    "rule": event.rule_name,
                    "condition": event.condition,
                    "severity": event.severity,
                    "node": event.node,
                    "gpu": event.gpu,
                    "value": event.value,
                    "reason": event.reason,
                    "summary": event.summary,
                    "starts_at": rfc3339(event.starts_at),
                    "ends_at": rfc3339(event.ends_at) if event.ends_at else None,
                },
                "created": rfc3339(event.created),
                "url": f"{external_url()}/alerts/",
            }
        )


class AlertmanagerFormat(Format):
    """Alertmanager's webhook payload, version 4, with one alert per notification."""

    name = "alertmanager"

    def render(self, event, receiver):
        labels = {"alertname": event.rule_name, "node": event.node, "severity": event.severity}
        if event.gpu is not None:
            labels["gpu"] = str(event.gpu)
        annotations = {"summary": event.summary, "description": event.description}
        group_labels = {"alertname": event.rule_name}
        label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return orjson.dumps(
            {
                "version": "4",
                "groupKey": f'{{}}:{{alertname="{event.rule_name}"}}/{{{label_text}}}',
                "truncatedAlerts": 0,
                "status": event.status,
                "receiver": receiver,
                "groupLabels": group_labels,
                "commonLabels": labels,
                "commonAnnotations": annotations,
                "externalURL": external_url(),
                "alerts": [
                    {
                        "status": event.status,
                        "labels": labels,
                        "annotations": annotations,
                        "startsAt": rfc3339(event.starts_at),
                        "endsAt": rfc3339(event.ends_at),
                        "generatorURL": f"{external_url()}/alerts/",
                        "fingerprint": event.fingerprint,
                    }
                ],
            }
        )


class SlackFormat(Format):
    name = "slack"

    def render(self, event, receiver):
        marker = {"firing": "FIRING", "repeat": "STILL FIRING", "resolved": "RESOLVED", "test": "TEST"}[event.kind]
        return orjson.dumps({"text": f"[{marker}] {event.summary} ({event.severity}): {event.description}"})


FORMATS = {cls.name: cls() for cls in (GpulseFormat, AlertmanagerFormat, SlackFormat)}
