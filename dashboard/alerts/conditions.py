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
from gpulse.activity import kernels_run_sms_idle
from gpulse.health import FAIL, VERDICT_LEVEL
from gpulse.status import DOWN, STALE, UP
from gpulse.xid import XidInfo, classify

COMPARE = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne
}


# A transition's reason is the condition with the value ("node.health >= 2 (now 2), held 5 s"), then,
# for the metrics that say more, DETAIL and what was found, then ACTION and what to do:
# "…: GPU 3 NVLink links: link 2 down; action: Drain the node…" (split_reason).
DETAIL = ": "
ACTION = "; action: "


def split_reason(reason: str) -> tuple[str, str]:
    """Return (what was found, what to do) of a transition's reason, each "" where it says none:
    what the pages show beside the rule's condition, which they say in words."""
    detail = reason.partition(DETAIL)[2]
    found, has_action, action = detail.rpartition(ACTION)
    return (found, action) if has_action else (detail, "")


def _reading(name):
    return lambda gpu: gpu.get(name)


def _mem_used_pct(gpu):
    used, total = gpu.get("mem_used"), gpu.get("mem_total")
    if used is None or not total:
        return None
    return 100.0 * used / total


def _xid_codes(gpu) -> list | None:
    """The sample's Xid codes, None where the GPU reports none."""
    events = gpu.get("xid")
    if events is None:
        return None
    codes = [e.get("code", 0) if isinstance(e, dict) else e for e in events]
    return [c for c in codes if isinstance(c, (int, float))]


def _xid(gpu):
    """Return the highest XID code in the sample (0 when none), so `== 79` can pick one."""
    codes = _xid_codes(gpu)
    return None if codes is None else max(codes, default=0)


def _xids(gpu) -> list[XidInfo] | None:
    """The sample's Xids as NVIDIA's catalogue classifies them, None where the GPU reports none."""
    codes = _xid_codes(gpu)
    return None if codes is None else [classify(c) for c in codes if isinstance(c, int) and c > 0]


# gpu.xid_severity: 1 for an Xid whose action is restarting the application (or nothing),
# 2 for one that needs a GPU reset, a reboot or a repair (gpulse/xid.py), 0 for none.
XID_LEVEL_WARN, XID_LEVEL_FAIL = 1, 2


def _xid_level(info: XidInfo) -> int:
    return XID_LEVEL_FAIL if info.severity == FAIL else XID_LEVEL_WARN


def _xid_severity(gpu):
    xids = _xids(gpu)
    return None if xids is None else max(map(_xid_level, xids), default=0)


def xid_detail(gpu: dict) -> str:
    """The sample's worst Xid with its catalogue description and action, to end the alert's reason."""
    xids = _xids(gpu)
    if not xids:
        return ""
    worst = max(xids, key=lambda info: (_xid_level(info), info.code))
    return f"{DETAIL}Xid {worst.code} ({worst.kind}): {worst.description}{ACTION}{worst.action}"


def _lost(gpu):
    return 1 if gpu.get("lost") else 0


def _throttle(reason):
    def read(gpu):
        reasons = gpu.get("throttle")
        if reasons is None:
            return None
        return 1 if reason in reasons else 0

    return read


def _idle_allocated(busy_util: float, busy_sm_activity: float):
    """1 while allocated and not busy (gpulse.usage.is_busy: SM activity where reported, else utilization),
    0 otherwise, no verdict while allocated without either."""

    def read(gpu):
        idle = usage.is_idle_allocated(gpu, busy_util, busy_sm_activity)
        return None if idle is None else int(idle)

    return read


def _sm_active(gpu):
    """SM activity in %, as people set its threshold (the sample's is a ratio, as GPM and DCGM give it)."""
    ratio = gpu.get("sm_active")
    return None if ratio is None else ratio * 100


def _sm_idle_busy(gpu):
    idle = kernels_run_sms_idle(gpu)
    return None if idle is None else int(idle)


GPU_READERS = {
    "gpu.util": _reading("util"),
    "gpu.sm_active": _sm_active,
    "gpu.sm_idle_busy": _sm_idle_busy,
    "gpu.temp": _reading("temp"),
    "gpu.power": _reading("power"),
    "gpu.mem_used_pct": _mem_used_pct,
    "gpu.ecc_uncorrected": _reading("ecc_uncorrected"),
    "gpu.xid": _xid,
    "gpu.xid_severity": _xid_severity,
    "gpu.lost": _lost,
}


# Node-level metrics whose firing alert inhibits the notifications of the node's GPU alerts
# (dashboard/alerts/evaluate.py, _inhibiting): the node's verdict, whose reason is its worst
# finding, a GPU's included, with the action; and a node gone silent.
INHIBITING = frozenset({"node.health", "node.down", "node.stale"})

# Metrics whose reason ends with the sample's worst Xid and its action (xid_detail).
DESCRIBES_XID = frozenset({"gpu.xid", "gpu.xid_severity"})

# Metrics whose notifications name the GPU's owner, so a receiver can tell them.
NAMES_OWNER = frozenset({"gpu.idle_allocated"})
# Characters of each owner part in the reason: the three fit its 300 after the condition.
OWNER_PART = 60


def owner_detail(owner: usage.Owner) -> str:
    """The owner's known parts, to end the alert's reason: ": user dana, job 41007, pod ml/nb-1"."""
    parts = [f"{label} {value if len(value) <= OWNER_PART else value[:OWNER_PART - 1] + '…'}"
             for label, value in zip(("user", "job", "pod"), owner, strict=True) if value]
    return DETAIL + ", ".join(parts) if parts else ""


# GPU-level health metrics: 1 while the GPU has a warn or fail finding of this check
# (dashboard.health.node_health), 0 when it has none, no verdict while the node sends no health.
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
    (its dashboard.health.node_health.NodeHealth), None without a verdict (down, no checks).
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


# What to do about a node whose samples stopped: the node.down alert's action.
DOWN_ACTION = ("Check that the node is up and reachable and that its collector runs "
               "(journalctl -u gpulse-collector); drain it if it is down")


def down_detail(node, now: float) -> str:
    """node.down's reason: how long since its last sample, and the action."""
    return f"{DETAIL}last sample {now - node.arrived:.0f} s ago{ACTION}{DOWN_ACTION}"


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
    action = f"{ACTION}{summary['action']}" if summary["action"] else ""
    return f"{DETAIL}{reason}{action}"


@dataclass(frozen=True)
class CompiledRule:
    id: int
    name: str
    metric: str
    gpu_level: bool
    gpu_index: int | None
    for_seconds: float
    repeat_interval: float
    keep_firing_for: float  # seconds a firing alert stays firing once its condition is false
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
            read = _idle_allocated(settings.GPULSE_BUSY_UTIL, settings.GPULSE_BUSY_SM_ACTIVITY)
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
            keep_firing_for=float(rule.keep_firing_for),
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
