"""Payload formats for webhook endpoints: one small class per format, in a registry."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from django.conf import settings

from dashboard.alerts.models import FIRING, RESOLVED, Transition
from gpulse.usage import NOBODY, Owner

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
    # Whose the GPU is, for the metrics that name it (gpu.idle_allocated); NOBODY otherwise.
    owner: Owner = NOBODY

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
        # The evaluator's reasons mostly start with the condition and its value already.
        if self.condition in self.reason:
            return self.reason
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
            owner=Owner(transition.owner_user, transition.owner_job, transition.owner_pod),
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


def go_time(moment: datetime | None) -> str:
    """Return ``moment`` as Go's time.Time marshals to JSON (RFC 3339, trailing zeros of the fraction dropped)."""
    if moment is None:
        return ZERO_TIME
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n",
               "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Return ``text`` quoted as Go's strconv.Quote (%q) does, as Alertmanager writes label values."""
    out = ['"']
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():  # Python's printable is Go's unicode.IsPrint: L, M, N, P, S and " "
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def label_set(labels: dict[str, str]) -> str:
    """Return ``labels`` as Prometheus' LabelSet.String(): sorted, name="value" pairs, values Go-quoted."""
    return "{" + ", ".join(f"{name}={go_quote(value)}" for name, value in sorted(labels.items())) + "}"


def external_url() -> str:
    return settings.GPULSE_EXTERNAL_URL.rstrip("/")


def alerts_url() -> str | None:
    """Return the absolute URL of the alerts page, None without GPULSE_EXTERNAL_URL (a path alone links nowhere)."""
    base = external_url()
    return f"{base}/alerts/" if base else None


def slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn reads as markup: a name like <!channel> must not ping anyone."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Format:
    name = ""
    content_type = "application/json"

    def render(self, event: Event, receiver: str, delivery_id: uuid.UUID | None = None) -> bytes:
        """The body; ``delivery_id`` (delivery.delivery_id) goes inside it where the format has room for it."""
        raise NotImplementedError


class GpulseFormat(Format):
    name = "gpulse"

    def render(self, event, receiver, delivery_id=None):
        return orjson.dumps(
            {
                "version": 1,
                "event_id": str(event.event_id),
                # Signed with the body: a receiver refuses one it has seen (docs/webhook-signature.md).
                "delivery_id": str(delivery_id) if delivery_id else None,
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
                    # {"user", "job", "pod"}, "" where unknown; null when no owner is known or the metric names none.
                    "owner": event.owner._asdict() if event.owner != NOBODY else None,
                },
                "created": rfc3339(event.created),
                "url": f"{external_url()}/alerts/",
            }
        )


class AlertmanagerFormat(Format):
    """Alertmanager's webhook payload, version 4, with one alert per notification.

    The shape is notify/webhook's Message (template.Data, version, groupKey,
    truncatedAlerts); times as Go's time.Time writes them. The groupKey is
    Alertmanager's route key and group labels ("{}:{alertname=...}"), then the
    alert's own labels, so each alert is its own group; without
    GPULSE_EXTERNAL_URL the URLs are empty rather than relative.
    """

    name = "alertmanager"

    def render(self, event, receiver, delivery_id=None):  # Alertmanager's shape, exactly: the id is a header
        labels = {"alertname": event.rule_name, "node": event.node, "severity": event.severity}
        if event.gpu is not None:
            labels["gpu"] = str(event.gpu)
        annotations = {"summary": event.summary, "description": event.description}
        # Annotations, not labels: the owner changes with the job, the alert's identity does not.
        annotations.update((name, value) for name, value in event.owner._asdict().items() if value)
        group_labels = {"alertname": event.rule_name}
        return orjson.dumps(
            {
                "version": "4",
                "groupKey": f"{{}}:{label_set(group_labels)}/{label_set(labels)}",
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
                        "startsAt": go_time(event.starts_at),
                        "endsAt": go_time(event.ends_at),
                        "generatorURL": alerts_url() or "",
                        "fingerprint": event.fingerprint,
                    }
                ],
            }
        )


class SlackFormat(Format):
    """A Slack incoming-webhook message: a text fallback, blocks, and a button to the alerts page when gpulse has a URL.

    Every name and reason is escaped for mrkdwn; the button's label is plain text.
    """

    name = "slack"
    MARKERS = {"firing": "FIRING", "repeat": "STILL FIRING", "resolved": "RESOLVED", "test": "TEST"}

    def render(self, event, receiver, delivery_id=None):  # Slack's shape: the id is a header
        headline = slack_escape(f"[{self.MARKERS[event.kind]}] {event.summary} ({event.severity})")
        description = slack_escape(event.description)
        blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*\n{description}"}}]
        url = alerts_url()
        if url:
            blocks.append({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Open in gpulse"}, "url": url},
            ]})
        return orjson.dumps({"text": f"{headline}: {description}", "blocks": blocks})


FORMATS = {cls.name: cls() for cls in (GpulseFormat, AlertmanagerFormat, SlackFormat)}
