"""Payload formats for webhook endpoints: one small class per format, in a registry."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from django.conf import settings

from dashboard.alerts.models import FIRING, RESOLVED, SEVERITY_RANK, Transition
from gpulse.usage import NOBODY, Owner

# Alertmanager's "no end yet" timestamp: Go's zero time.
ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True)
class EventAlert:
    """One alert of a notification, as its transition left it."""

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
    def from_transition(cls, transition: Transition) -> "EventAlert":
        alert = transition.alert
        rule = alert.rule
        return cls(
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
            owner=Owner(transition.owner_user, transition.owner_job, transition.owner_pod),
        )


# A group's kind is its most pressing alert's: a new firing before a repeat before a resolution.
_KIND_ORDER = ("test", "firing", "repeat", "resolved")


@dataclass(frozen=True)
class Event:
    """One notification: the alerts of one node's group (Alertmanager's group_by [node]), whatever the format."""

    event_id: uuid.UUID
    node: str  # the group's
    alerts: tuple[EventAlert, ...]  # the most severe first
    created: datetime

    @property
    def kind(self) -> str:
        return min((a.kind for a in self.alerts), key=_KIND_ORDER.index)

    @property
    def status(self) -> str:
        """Firing while any of its alerts fires, as Alertmanager's."""
        return FIRING if any(a.status == FIRING for a in self.alerts) else RESOLVED

    @property
    def severity(self) -> str:
        return max((a.severity for a in self.alerts), key=SEVERITY_RANK.__getitem__)

    @classmethod
    def from_transitions(cls, event_id: uuid.UUID, transitions: list[Transition]) -> "Event":
        """The notification ``event_id`` of ``transitions`` (one node's, at least one, ``alert__rule`` loaded)."""
        alerts = sorted(
            (EventAlert.from_transition(t) for t in transitions),
            key=lambda a: (-SEVERITY_RANK[a.severity], a.rule_name, -1 if a.gpu is None else a.gpu),
        )
        return cls(event_id=event_id, node=alerts[0].node, alerts=tuple(alerts),
                   created=max(t.created for t in transitions))

    @classmethod
    def test(cls, now: datetime | None = None) -> "Event":
        now = now or datetime.now(UTC)
        alert = EventAlert(
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
        )
        return cls(event_id=uuid.uuid4(), node=alert.node, alerts=(alert,), created=now)


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
                "version": 2,
                "event_id": str(event.event_id),
                # Signed with the body: a receiver refuses one it has seen (docs/webhook-signature.md).
                "delivery_id": str(delivery_id) if delivery_id else None,
                "kind": event.kind,
                "status": event.status,
                "receiver": receiver,
                "group": {"node": event.node},
                "alerts": [self._alert(alert) for alert in event.alerts],
                "created": rfc3339(event.created),
                "url": f"{external_url()}/alerts/",
            }
        )

    @staticmethod
    def _alert(alert: EventAlert) -> dict:
        return {
            "fingerprint": alert.fingerprint,
            "rule_id": alert.rule_id,
            "rule": alert.rule_name,
            "condition": alert.condition,
            "severity": alert.severity,
            "node": alert.node,
            "gpu": alert.gpu,
            "kind": alert.kind,
            "status": alert.status,
            "value": alert.value,
            "reason": alert.reason,
            "summary": alert.summary,
            "starts_at": rfc3339(alert.starts_at),
            "ends_at": rfc3339(alert.ends_at) if alert.ends_at else None,
            # {"user", "job", "pod"}, "" where unknown; null when no owner is known or the metric names none.
            "owner": alert.owner._asdict() if alert.owner != NOBODY else None,
        }


def common(pairs: list[dict[str, str]]) -> dict[str, str]:
    """Return the name/value pairs every one of ``pairs`` has, as Alertmanager's commonLabels and commonAnnotations."""
    first, *rest = pairs
    return {name: value for name, value in first.items() if all(other.get(name) == value for other in rest)}


class AlertmanagerFormat(Format):
    """Alertmanager's webhook payload, version 4: one group of alerts, grouped by node.

    The shape is notify/webhook's Message (template.Data, version, groupKey,
    truncatedAlerts); times as Go's time.Time writes them. The groupKey is
    Alertmanager's route key and group labels (``{}:{node="gpu-01"}``), as a
    route with ``group_by: [node]`` makes it; without GPULSE_EXTERNAL_URL the
    URLs are empty rather than relative.
    """

    name = "alertmanager"

    def render(self, event, receiver, delivery_id=None):  # Alertmanager's shape, exactly: the id is a header
        alerts = [self._alert(alert) for alert in event.alerts]
        group_labels = {"node": event.node}
        return orjson.dumps(
            {
                "version": "4",
                "groupKey": f"{{}}:{label_set(group_labels)}",
                "truncatedAlerts": 0,
                "status": event.status,
                "receiver": receiver,
                "groupLabels": group_labels,
                "commonLabels": common([a["labels"] for a in alerts]),
                "commonAnnotations": common([a["annotations"] for a in alerts]),
                "externalURL": external_url(),
                "alerts": alerts,
            }
        )

    @staticmethod
    def _alert(alert: EventAlert) -> dict:
        labels = {"alertname": alert.rule_name, "node": alert.node, "severity": alert.severity}
        if alert.gpu is not None:
            labels["gpu"] = str(alert.gpu)
        annotations = {"summary": alert.summary, "description": alert.description}
        # Annotations, not labels: the owner changes with the job, the alert's identity does not.
        annotations.update((name, value) for name, value in alert.owner._asdict().items() if value)
        return {
            "status": alert.status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": go_time(alert.starts_at),
            "endsAt": go_time(alert.ends_at),
            "generatorURL": alerts_url() or "",
            "fingerprint": alert.fingerprint,
        }


class SlackFormat(Format):
    """A Slack incoming-webhook message: a text fallback, blocks, and a button to the alerts page when gpulse has a URL.

    A group of several alerts is a headline and one section per alert, at most MAX_ALERTS of them, then
    "and N more"; each line is cut to MAX_LINE characters once escaped, so the message stays within Slack's
    limits (3,000 characters a section, 50 blocks, 40,000 characters of text) whatever the names hold.
    Every name and reason is escaped for mrkdwn; the button's label is plain text.
    """

    name = "slack"
    MARKERS = {"firing": "FIRING", "repeat": "STILL FIRING", "resolved": "RESOLVED", "test": "TEST"}
    MAX_ALERTS = 20
    MAX_LINE = 1400  # two of them and "*…*\n" fit a section

    def render(self, event, receiver, delivery_id=None):  # Slack's shape: the id is a header
        if len(event.alerts) == 1:
            [alert] = event.alerts
            headline = self._escaped(f"[{self.MARKERS[event.kind]}] {alert.summary} ({alert.severity})")
            lines = [self._escaped(alert.description)]
            text = f"{headline}: {lines[0]}"
            sections = [f"*{headline}*\n{lines[0]}"]
        else:
            headline = self._escaped(
                f"[{self.MARKERS[event.kind]}] {len(event.alerts)} alerts on {event.node} ({event.severity})")
            lines = [self._line(alert) for alert in event.alerts[:self.MAX_ALERTS]]
            more = len(event.alerts) - len(lines)
            if more:
                lines.append(f"and {more} more")
            text = "\n".join([headline, *lines])
            sections = [f"*{headline}*", *lines]
        blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": section}} for section in sections]
        url = alerts_url()
        if url:
            blocks.append({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Open in gpulse"}, "url": url},
            ]})
        return orjson.dumps({"text": text, "blocks": blocks})

    def _line(self, alert: EventAlert) -> str:
        return self._escaped(f"[{self.MARKERS[alert.kind]}] {alert.summary} ({alert.severity}): {alert.description}")

    def _escaped(self, text: str) -> str:
        escaped = slack_escape(text)
        if len(escaped) <= self.MAX_LINE:
            return escaped
        cut = escaped[:self.MAX_LINE - 1]
        entity = cut.rfind("&")
        if entity > len(cut) - 5 and ";" not in cut[entity:]:
            cut = cut[:entity]  # never half an "&amp;": Slack would show it as typed
        return cut + "…"


FORMATS = {cls.name: cls() for cls in (GpulseFormat, AlertmanagerFormat, SlackFormat)}
