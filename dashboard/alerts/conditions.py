"""How a rule reads its metric from a sample and tests it: compiled once per rule load.

A reading the GPU does not report (None) gives no verdict: the alert keeps its
state rather than resolving on missing data.
"""

import operator
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from dashboard.alerts.models import Rule, is_gpu_metric
from gpulse import usage
from gpulse.health import VERDICT_LEVEL
from gpulse.status import DOWN, STALE, UP

COMPARE = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne
}


def _reading(name):
    return lambda gpu: gpu.get(name)


def _mem_used_pct(gpu):
    used, total = gpu.get("mem_used"), gpu.get("mem_total")
    if used is None or not total:
        return None
    return 100.0 * used / total


def _xid(gpu):
    """Return the highest XID code in the sample (0 when none), so `== 79` can pick one."""
    events = gpu.get("xid")
    if events is None:
        return None
    codes = [e.get("code", 0) if isinstance(e, dict) else e for e in events]
    codes = [c for c in codes if isinstance(c, (int, float))]
    return max(codes, default=0)


def _lost(gpu):
    return 1 if gpu.get("lost") else 0


def _throttle(reason):
    def read(gpu):
        reasons = gpu.get("throttle")
        if reasons is None:
            return None
        return 1 if reason in reasons else 0

    return read


def _idle_allocated(busy_util: float):
    """1 while allocated and below ``busy_util``, 0 otherwise, no verdict while allocated without a utilization."""

    def read(gpu):
        idle = usage.is_idle_allocated(gpu, busy_util)
        return None if idle is None else int(idle)

    return read


GPU_READERS = {
    "gpu.util": _reading("util"),
    "gpu.temp": _reading("temp"),
    "gpu.power": _reading("power"),
    "gpu.mem_used_pct": _mem_used_pct,
    "gpu.ecc_uncorrected": _reading("ecc_uncorrected"),
    "gpu.xid": _xid,
    "gpu.lost": _lost,
}


# Metrics whose notifications name the GPU's owner, so a receiver can tell them.
NAMES_OWNER = frozenset({"gpu.idle_allocated"})
# Characters of each owner part in the reason: the three fit its 300 after the condition.
OWNER_PART = 60


def owner_detail(owner: usage.Owner) -> str:
    """The owner's known parts, to end the alert's reason: ": user dana, job 41007, pod ml/nb-1"."""
    parts = [f"{label} {value if len(value) <= OWNER_PART else value[:OWNER_PART - 1] + '…'}"
             for label, value in zip(("user", "job", "pod"), owner, strict=True) if value]
    return ": " + ", ".join(parts) if parts else ""


# GPU-level health metrics: 1 while the GPU has a warn or fail finding of this check
# (dashboard.live.node_health), 0 when it has none, no verdict while the node sends no health.
HEALTH_GPU_CHECKS = {
    "gpu.pcie_degraded": "pcie_link",
    "gpu.row_remap_pending": "row_remap",
    "gpu.nvlink_down": "nvlink_state",
}
IB_PORT_UP = ("ACTIVE", "LinkUp")


def _ib_ports_down(sample: dict) -> int | None:
    ports = sample.get("ib")
    if ports is None:
        return None
    return sum(1 for port in ports if (port.get("state"), port.get("phys_state")) != IB_PORT_UP)


def node_value(metric: str, node, health=None) -> int | None:
    """Return the node-level metric's value for the node (a dashboard.live.state.NodeState).

    node.down, node.stale, node.clock_skew, node.twin_collector (a second collector reports
    as the node): 1 when the node is in that state, else 0.
    node.health: its verdict's level (0 healthy, 1 degraded, 2 failing) from ``health``
    (its dashboard.live.node_health.NodeHealth), None without a verdict (down, no checks).
    ib.port_down: how many of its InfiniBand/RoCE ports are not ACTIVE/LinkUp, None when
    it reports no ports or is not up (its last sample is not current).
    """
    if metric == "node.health":
        return None if health is None else VERDICT_LEVEL.get(health.verdict)
    if metric == "ib.port_down":
        return _ib_ports_down(node.sample) if node.status == UP else None
    if metric == "node.down":
        return 1 if node.status == DOWN else 0
    if metric == "node.clock_skew":
        return 0 if node.skew is None else 1
    if metric == "node.twin_collector":
        return 0 if node.identity.twin_since is None else 1
    return 1 if node.status in (STALE, DOWN) else 0


# A transition's reason holds 300 characters: the condition (~70), the finding, then the
# action (up to ~105 with its label), which must not be the part cut off.
DETAIL_REASON = 120


def health_detail(metric: str, health) -> str:
    """node.health's reason and action, to end the alert's reason (and so the webhook's message)."""
    if metric != "node.health" or health is None:
        return ""
    summary = health.frame_entry()  # built once per change, not per rule and tick
    reason = summary.get("reason")
    if not reason:
        return ""
    if len(reason) > DETAIL_REASON:
        reason = reason[:DETAIL_REASON - 1] + "…"
    action = f"; action: {summary['action']}" if summary["action"] else ""
    return f": {reason}{action}"


@dataclass(frozen=True)
class CompiledRule:
    id: int
    name: str
    metric: str
    gpu_level: bool
    gpu_index: int | None
    for_seconds: float
    repeat_interval: float
    severity: str
    read: Callable | None  # GPU-level rules: sample GPU dict → value or None
    health_check: str | None  # GPU-level health metrics: the check whose findings they count
    test: Callable  # value → bool
    rule: Rule

    @classmethod
    def compile(cls, rule: Rule) -> "CompiledRule":
        compare, threshold = COMPARE[rule.comparison], rule.threshold
        gpu_level = is_gpu_metric(rule.metric)
        if rule.metric == "gpu.throttle":
            read = _throttle(rule.throttle_reason)
        elif rule.metric == "gpu.idle_allocated":
            read = _idle_allocated(settings.GPULSE_BUSY_UTIL)
        else:
            read = GPU_READERS.get(rule.metric)
        return cls(
            id=rule.id,
            name=rule.name,
            metric=rule.metric,
            gpu_level=gpu_level,
            gpu_index=rule.gpu_index,
            for_seconds=float(rule.for_seconds),
            repeat_interval=float(rule.repeat_interval),
            severity=rule.severity,
            read=read if gpu_level else None,
            health_check=HEALTH_GPU_CHECKS.get(rule.metric),
            test=lambda value: compare(value, threshold),
            rule=rule,
        )

    def covers(self, node: str, gpu: int | None) -> bool:
        """Whether the target (node, gpu) is in this rule's scope."""
        if (gpu is not None) != self.gpu_level or not self.rule.matches_node(node):
            return False
        return self.gpu_index is None or self.gpu_index == gpu

    def describe(self, value) -> str:
        shown = "no reading" if value is None else f"{value:g}"
        return f"{self.rule.condition_text()} (now {shown})"
