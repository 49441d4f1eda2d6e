"""How a rule reads its metric from a sample and tests it: compiled once per rule load.

A reading the GPU does not report (None) gives no verdict: the alert keeps its
state rather than resolving on missing data.
"""

import operator
from collections.abc import Callable
from dataclasses import dataclass

from dashboard.alerts.models import Rule, is_gpu_metric
from gpulse.status import DOWN, STALE

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


GPU_READERS = {
    "gpu.util": _reading("util"),
    "gpu.temp": _reading("temp"),
    "gpu.power": _reading("power"),
    "gpu.mem_used_pct": _mem_used_pct,
    "gpu.ecc_uncorrected": _reading("ecc_uncorrected"),
    "gpu.xid": _xid,
    "gpu.lost": _lost,
}


def node_value(metric: str, node) -> int:
    """Return 1 when the node (a dashboard.live.state.NodeState) is in the state node.down,
    node.stale or node.clock_skew names, else 0."""
    if metric == "node.down":
        return 1 if node.status == DOWN else 0
    if metric == "node.clock_skew":
        return 0 if node.skew is None else 1
    return 1 if node.status in (STALE, DOWN) else 0


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
    test: Callable  # value → bool
    rule: Rule

    @classmethod
    def compile(cls, rule: Rule) -> "CompiledRule":
        compare, threshold = COMPARE[rule.comparison], rule.threshold
        gpu_level = is_gpu_metric(rule.metric)
        if rule.metric == "gpu.throttle":
            read = _throttle(rule.throttle_reason)
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
