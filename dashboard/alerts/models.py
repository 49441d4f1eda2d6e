"""Alert rules, their per-target state and history, silences and webhook endpoints.

One Alert row per (rule, node, gpu), found by its fingerprint; its status is
changed only by compare-and-set, so two ingest processes never both record
the same transition. Each change is a Transition row (old, new, reason) that a
sender claims with ``filter(id=x, processed=None).update(processed=now)``, then adds to its node's open
Notification, the group one webhook delivery per endpoint carries.
"""

import fnmatch
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from gpulse.schema import GPU_METRICS
from gpulse.throttle import THROTTLE_REASONS

_SAMPLE_UNITS = {m.name: m.unit for m in GPU_METRICS}


@dataclass(frozen=True)
class RuleMetric:
    """A metric a rule can watch, and how the pages say it (dashboard/alerts/words.py)."""

    name: str
    words: str  # in a sentence: "GPU temperature"
    unit: str = ""  # of its values and thresholds: "°C"
    legend: str = ""  # what a count's, code's or flag's values mean: "1 = lost"
    flag: bool = False  # 1 or 0: "== 1" reads as the words alone, "GPU lost"

    @property
    def label(self) -> str:
        note = self.unit or self.legend
        return f"{self.words} ({note})" if note else self.words


RULE_METRICS = (
    RuleMetric("gpu.util", "GPU utilization", _SAMPLE_UNITS["util"]),
    RuleMetric("gpu.temp", "GPU temperature", _SAMPLE_UNITS["temp"]),
    RuleMetric("gpu.power", "GPU power draw", _SAMPLE_UNITS["power"]),
    RuleMetric("gpu.mem_used_pct", "GPU memory used", "%"),
    RuleMetric("gpu.sm_active", "GPU SM activity", "%"),
    RuleMetric("gpu.sm_idle_busy", "kernels run, SMs idle: utilization ≥ 90 %, SM activity < 20 %",
               legend="1 = yes; usually for 60 s", flag=True),
    RuleMetric("gpu.ecc_uncorrected", "uncorrected ECC errors"),
    RuleMetric("gpu.xid", "XID error code", legend="0 = none"),
    RuleMetric("gpu.xid_severity", "Xid severity by NVIDIA's catalogue",
               legend="0 none, 1 restart the application, 2 reset, reboot or replace the GPU"),
    RuleMetric("gpu.lost", "GPU lost / fallen off the bus", legend="1 = lost", flag=True),
    RuleMetric("gpu.throttle", "throttle reason present", legend="1 = present", flag=True),
    RuleMetric("node.down", "node down: latest sample expired", legend="1 = down", flag=True),
    RuleMetric("node.stale", "node stale or down", legend="1 = stale", flag=True),
    RuleMetric("node.clock_skew", "node's clock off by more than GPULSE_MAX_CLOCK_SKEW", legend="1 = off", flag=True),
    RuleMetric("node.twin_collector", "two collectors report as the node", legend="1 = two", flag=True),
    RuleMetric("node.health", "node health verdict", legend="0 healthy, 1 degraded, 2 failing"),
    RuleMetric("gpu.pcie_degraded", "GPU PCIe link below its maximum", legend="1 = degraded", flag=True),
    RuleMetric("gpu.row_remap_pending", "GPU row remap pending or failed", legend="1 = yes", flag=True),
    RuleMetric("gpu.nvlink_down", "GPU NVLink link down", legend="1 = down", flag=True),
    RuleMetric("ib.port_down", "InfiniBand/RoCE ports not ACTIVE/LinkUp", legend="count"),
    RuleMetric("gpu.idle_allocated", "GPU allocated but idle: SM activity below GPULSE_BUSY_SM_ACTIVITY, "
               "else utilization below GPULSE_BUSY_UTIL",
               legend="1 = idle; usually for 1800 s", flag=True),
    RuleMetric("probe.busbw", "NCCL probe bus bandwidth", "GB/s"),
)
RULE_METRIC = {m.name: m for m in RULE_METRICS}
METRICS = tuple((m.name, m.label) for m in RULE_METRICS)
COMPARISONS = (">", ">=", "<", "<=", "==", "!=")
SEVERITIES = ("info", "warning", "critical")
# Seconds a drained node's alert must stay resolved before gpulse resumes it.
DEFAULT_RESUME_AFTER = 600
MAX_RESUME_AFTER = 7 * 24 * 3600
MAX_KEEP_FIRING_FOR = 24 * 3600
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}

INACTIVE, PENDING, FIRING, RESOLVED = "inactive", "pending", "firing", "resolved"
STATUSES = (INACTIVE, PENDING, FIRING, RESOLVED)

FORMATS = (
    ("gpulse", "gpulse JSON"),
    ("alertmanager", "Alertmanager webhook v4"),
    ("slack", "Slack-compatible text"),
)


def is_gpu_metric(metric: str) -> bool:
    return metric.startswith("gpu.")


def fingerprint(rule_id: int, node: str, gpu: int | None) -> str:
    """Return the 16-hex-digit identity of one alert target (Alertmanager's length)."""
    labels = f"rule={rule_id}\x00node={node}\x00gpu={'' if gpu is None else gpu}"
    return hashlib.sha256(labels.encode()).hexdigest()[:16]


class Rule(models.Model):
    name = models.CharField(max_length=100, unique=True)
    metric = models.CharField(max_length=32, choices=METRICS)
    throttle_reason = models.CharField(
        max_length=40,
        blank=True,
        choices=[(r, r) for r in THROTTLE_REASONS],
        help_text="Only for gpu.throttle: the reason that must be present.",
    )
    comparison = models.CharField(max_length=2, choices=[(c, c) for c in COMPARISONS], default=">")
    threshold = models.FloatField(default=0)
    for_seconds = models.PositiveIntegerField(default=0, help_text="How long the condition must hold before firing.")
    node_glob = models.CharField(
        max_length=200, blank=True, default="", help_text="Node name or glob (gpu-0*); blank or * = all nodes."
    )
    gpu_index = models.PositiveSmallIntegerField(
        "GPU index", null=True, blank=True, help_text="Only this GPU index; blank = all."
    )
    severity = models.CharField(max_length=10, choices=[(s, s) for s in SEVERITIES], default="warning")
    enabled = models.BooleanField(default=True)
    repeat_interval = models.PositiveIntegerField(
        default=4 * 3600, help_text="Seconds between repeated notifications while firing."
    )
    drain = models.BooleanField(
        default=False,
        help_text="Drain the node in Slurm while this fires (needs GPULSE_SLURM_DRAIN=true); "
        "a GPU-level rule drains the GPU's node.",
    )
    keep_firing_for = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_KEEP_FIRING_FOR)],
        help_text="Seconds a firing alert stays firing after its condition turns false, as Prometheus' "
        "keep_firing_for: a flapping condition is one alert, not a firing and a resolution each flap.",
    )
    resume_after = models.PositiveIntegerField(
        default=DEFAULT_RESUME_AFTER,
        validators=[MaxValueValidator(MAX_RESUME_AFTER)],
        help_text="Seconds the alert must stay resolved before gpulse resumes a node it drained.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def matches_node(self, node: str) -> bool:
        return self.node_glob in ("", "*") or fnmatch.fnmatchcase(node, self.node_glob)

    def condition_text(self) -> str:
        metric = f"{self.metric}[{self.throttle_reason}]" if self.metric == "gpu.throttle" else self.metric
        text = f"{metric} {self.comparison} {self.threshold:g}"
        return f"{text} for {self.for_seconds} s" if self.for_seconds else text

    def scope_text(self) -> str:
        nodes = self.node_glob if self.node_glob not in ("", "*") else "all nodes"
        return nodes if self.gpu_index is None else f"{nodes}, GPU {self.gpu_index}"


class Alert(models.Model):
    """The current state of one (rule, node, gpu); history lives in Transition rows."""

    fingerprint = models.CharField(max_length=16, unique=True)
    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="alerts")
    node = models.CharField(max_length=200)
    gpu = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES], default=INACTIVE)
    status_since = models.DateTimeField()
    value = models.FloatField(null=True, blank=True)
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Whether the current firing episode was notified; a resolved notice goes
    # out only then, so receivers never see a resolution without its alert.
    notified = models.BooleanField(default=False)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # Token of the evaluation that last won a compare-and-set on this row.
    claim = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["status"]), models.Index(fields=["claim"])]

    def __str__(self):
        return f"{self.rule_id} {self.target}"

    @property
    def target(self) -> str:
        return self.node if self.gpu is None else f"{self.node} GPU {self.gpu}"


class Notification(models.Model):
    """One webhook notification: the alerts of one node that notify within GPULSE_ALERT_GROUP_WAIT of its first,
    as Alertmanager groups by a label and waits group_wait (dashboard/alerts/tasks.py).

    Open (``processed`` empty) while alerts may join it; flushing claims it, and what it sends is the
    transitions that joined it by then. At most one group of a node is open at once.
    """

    node = models.CharField(max_length=200)  # the group key: Alertmanager's group_by [node]
    # The same id goes out with every endpoint and every retry of this notification.
    event_id = models.UUIDField(default=uuid.uuid4, unique=True)
    created = models.DateTimeField()
    # When the last alert joined it: a join writes this row, so a join and the flush's claim take turns.
    updated = models.DateTimeField()
    processed = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=models.Q(processed=None), name="one_open_group_per_node"
            ),
        ]

    def __str__(self):
        return f"notification {self.event_id} ({self.node})"


class Transition(models.Model):
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="transitions")
    old = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES])
    new = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES])
    reason = models.CharField(max_length=300)
    value = models.FloatField(null=True, blank=True)
    since = models.DateTimeField(null=True, blank=True, help_text="When the old status began.")
    created = models.DateTimeField()
    notify = models.BooleanField(default=False)
    processed = models.DateTimeField(null=True, blank=True)
    # The group it went out in, once dispatched.
    notification = models.ForeignKey(
        Notification, on_delete=models.SET_NULL, null=True, blank=True, related_name="transitions"
    )
    # This transition's own id; what a receiver is sent is its notification's.
    event_id = models.UUIDField(default=uuid.uuid4, unique=True)
    # Whose the GPU was (gpulse.usage.owner), for the metrics that name the owner
    # (gpu.idle_allocated); "" where unknown. Bounded by the sample schema: user
    # and job at most 128 characters, a pod "namespace/name" of two 253-character names.
    owner_user = models.CharField(max_length=128, blank=True, default="")
    owner_job = models.CharField(max_length=128, blank=True, default="")
    owner_pod = models.CharField(max_length=507, blank=True, default="")

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["new", "created"])]

    def __str__(self):
        return f"{self.alert_id}: {self.old} → {self.new}"

    @property
    def kind(self) -> str:
        """Return firing, resolved, or repeat (still firing, notified again)."""
        if self.old == FIRING and self.new == FIRING:
            return "repeat"
        return self.new

    @property
    def duration(self):
        return self.created - self.since if self.since else None


class Silence(models.Model):
    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, null=True, blank=True, related_name="silences")
    node_glob = models.CharField(max_length=200, blank=True, default="", help_text="Node name or glob; blank = any.")
    gpu = models.PositiveSmallIntegerField("GPU", null=True, blank=True, help_text="GPU index; blank = any.")
    until = models.DateTimeField()
    comment = models.CharField(max_length=300, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-until"]

    def __str__(self):
        return f"silence {self.scope_text()} until {self.until:%Y-%m-%d %H:%M}"

    def matches(self, rule_id: int, node: str, gpu: int | None) -> bool:
        if self.rule_id is not None and self.rule_id != rule_id:
            return False
        if self.node_glob and not fnmatch.fnmatchcase(node, self.node_glob):
            return False
        return self.gpu is None or self.gpu == gpu

    def scope_text(self) -> str:
        parts = []
        if self.rule_id is not None:
            parts.append(f"rule {self.rule.name}")
        if self.node_glob:
            parts.append(f"node {self.node_glob}")
        if self.gpu is not None:
            parts.append(f"GPU {self.gpu}")
        return ", ".join(parts)


def validate_webhook_url(url: str) -> None:
    """Accept http(s) URLs with a host, including single-label names such as http://alertmanager:9093/."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise ValidationError("not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ValidationError("use an http:// or https:// URL")
    if not parts.hostname or any(c.isspace() for c in url):
        raise ValidationError("not a valid URL: it needs a host name and no spaces")


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class WebhookEndpoint(models.Model):
    name = models.CharField(max_length=100, unique=True)
    url = models.CharField("URL", max_length=1000, validators=[validate_webhook_url])
    # Stored in clear because signing needs it; never logged, never sent back by the API.
    secret = models.CharField(max_length=200, default=new_secret)
    format = models.CharField(max_length=20, choices=FORMATS, default="gpulse")
    enabled = models.BooleanField(default=True)
    min_severity = models.CharField(max_length=10, choices=[(s, s) for s in SEVERITIES], default="info")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def wants(self, severity: str) -> bool:
        return SEVERITY_RANK[severity] >= SEVERITY_RANK[self.min_severity]


class DeliveryAttempt(models.Model):
    """One HTTP attempt to deliver one notification to one endpoint (never the secret)."""

    # failed: the receiver refused for good; gave_up: the last allowed attempt failed temporarily.
    OK, RETRY, FAILED, GAVE_UP = "ok", "retry", "failed", "gave_up"
    OUTCOMES = ((OK, "ok"), (RETRY, "retry"), (FAILED, "failed"), (GAVE_UP, "gave up"))

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="attempts")
    notification = models.ForeignKey(
        Notification, on_delete=models.SET_NULL, null=True, blank=True, related_name="attempts"
    )
    event_id = models.UUIDField()
    kind = models.CharField(max_length=10)  # firing, resolved, repeat or test
    # How many of the notification's alerts this endpoint was sent: those of the severities it wants.
    alerts = models.PositiveIntegerField(default=1)
    attempt = models.PositiveSmallIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    outcome = models.CharField(max_length=10, choices=OUTCOMES)
    duration_ms = models.FloatField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"{self.endpoint} {self.kind} #{self.attempt}: {self.status_code or self.error}"


class RulesGeneration(models.Model):
    """One row, bumped whenever a rule or a silence changes (dashboard/alerts/generation.py): the alert
    evaluator reads it every tick and reloads its rules and silences when it moved, so an edit takes
    effect at the next tick, not at the next timed reload."""

    value = models.PositiveBigIntegerField(default=0)

    def __str__(self):
        return f"rules generation {self.value}"
