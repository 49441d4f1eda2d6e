"""Node health on the control host: each node's verdict, its findings and since when they hold.

Ingest calls update() with each node's newest sample, which only compares the
sample's findings and versions with the node's last ones, and tick() once per
tick: tick() judges the nodes that changed, adds the cluster check
version_skew (driver, CUDA and GPU model against the majority of the node's
group, counted incrementally and read once per tick)
and returns the nodes whose health changed. Ingest writes those to the Redis
hash Keys().health, frames them, and records each verdict change (``changes``)
as a live.HealthChange row (docs/ARCHITECTURE.md, "Node health").

A finding is one (check, gpu, status): its since holds while the node keeps
sending it, whatever its reason says (rates change every sample); a finding
that changes status is a new one. A node without a ``health`` object, or down,
has no verdict ("unknown") and no findings: nothing current is known of it.
"""

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpulse import health, schema
from gpulse.health import FindingKey
from gpulse.status import DOWN

log = logging.getLogger("gpulse.ingest")

SKEW = "version_skew"
DIAGNOSTIC = "fabric"  # judged from the fabric diagnostics' findings (board["diagnostics"])
# What version_skew compares within a group, as its reason names them; the node's versions are kept
# in this order, then its group (system.group: a partition or node pool; None for the whole cluster).
VERSION_LABELS = ("driver", "CUDA", "GPU model")
# The worst finding first: fail, warn, unknown, then by the catalogue's order, then by GPU.
STATUS_ORDER = {health.FAIL: 0, health.WARN: 1, health.UNKNOWN: 2}
CHECK_ORDER = {check_id: position for position, check_id in enumerate(health.CHECK_IDS)}
# Worst verdict first, for lists: a node with no verdict sorts between degraded and healthy.
VERDICT_ORDER = {health.FAILING: 0, health.DEGRADED: 1, health.NO_VERDICT: 2, health.HEALTHY: 3}
DOWN_REASON = "node down: nothing current is known of its health"
UNCHECKED_REASON = "its source runs no health checks"


@dataclass
class Finding:
    reason: str
    since: float  # unix seconds the finding has held


def finding_text(check_id: str, gpu: int | None, reason: str) -> str:
    """A finding as one line: "GPU 3 NVLink links: link 2 down, 17 up"."""
    check = health.BY_ID[check_id]
    # A node check's reason names its GPUs itself (gpu_count: "GPU 3 missing: 7 of 8 on the bus").
    where = check.title if gpu is None or check.scope != health.GPU else f"GPU {gpu} {check.title}"
    return f"{where}: {reason}" if reason else where


def _order(key: FindingKey) -> tuple:
    check, gpu, status = key
    return STATUS_ORDER[status], CHECK_ORDER[check], -1 if gpu is None else gpu


def worst(findings: dict[FindingKey, Finding]) -> FindingKey | None:
    return min(findings, key=_order, default=None)


def worst_first(findings: dict[FindingKey, Finding]) -> list[tuple[FindingKey, Finding]]:
    return sorted(findings.items(), key=lambda item: _order(item[0]))


def count_findings(keys) -> int:
    """How many findings are warn or fail (an unknown one says a check could not run, not a fault)."""
    return sum(1 for _, _, status in keys if status in (health.WARN, health.FAIL))


def gpu_model(gpus: list) -> str | None:
    """The node's GPU model(s) as one text, None for a node without GPUs (nothing to compare)."""
    names = {gpu.get("name") for gpu in gpus} - {None}
    return ", ".join(sorted(names)) if names else None


@dataclass
class NodeHealth:
    reported: dict[FindingKey, str] | None = None  # the node's own findings -> reason; None: no health object
    reported_checked: tuple[str, ...] = ()
    versions: tuple | None = None  # (driver, cuda, model, group) while the node reports ``system``
    down: bool = False
    verdict: str = health.NO_VERDICT
    since: float | None = None  # when it got this verdict; None before its first judgement
    checked: tuple[str, ...] = ()
    findings: dict[FindingKey, Finding] = field(default_factory=dict)
    # frame_entry(), kept until the node is judged different: every sampled node is framed every tick.
    framed: dict | None = field(default=None, compare=False, repr=False)

    def summary(self) -> dict:
        """verdict, reason and action (the worst finding's), since and the count of warn/fail findings."""
        reason = action = ""
        key = worst(self.findings)
        if self.verdict == health.NO_VERDICT:
            reason = DOWN_REASON if self.down else UNCHECKED_REASON
        elif key is not None and self.verdict != health.HEALTHY:
            reason = finding_text(key[0], key[1], self.findings[key].reason)
            action = health.action(key[0], key[2])
        return {"verdict": self.verdict, "reason": reason, "action": action, "since": self.since,
                "findings": count_findings(self.findings)}

    def frame_entry(self) -> dict:
        """The node's ``health`` in a frame: the verdict alone while healthy."""
        if self.framed is None:
            self.framed = {"verdict": self.verdict} if self.verdict == health.HEALTHY else self.summary()
        return self.framed

    def record(self) -> dict:
        """What the Redis hash Keys().health holds for the node."""
        return {
            "verdict": self.verdict,
            "since": self.since,
            "checked": list(self.checked),
            "findings": [
                {"check": check, "gpu": gpu, "status": status, "reason": finding.reason,
                 "action": health.action(check, status), "since": finding.since}
                for (check, gpu, status), finding in worst_first(self.findings)
            ],
        }

    def flagged(self) -> set[tuple[str, int | None]]:
        """(check, gpu) of every warn or fail finding: what the GPU-level health alert metrics read."""
        return {(check, gpu) for check, gpu, status in self.findings if status in (health.WARN, health.FAIL)}


@dataclass(frozen=True)
class HealthChange:
    node: str
    at: float
    old: str
    new: str
    reason: str


def _number(value, what: str) -> float:
    if type(value) not in (int, float) or not 0 <= value <= schema.MAX_TS:
        raise schema.MalformedSample(f"{what} is not a unix time")
    return float(value)


def read_record(raw: bytes) -> dict:
    """A node's entry of the Keys().health hash, checked as a sample is: raise MalformedSample.

    Ingest writes it, but it lives in Redis, which any holder of the password can write.
    """
    record = schema.json_object(raw)
    if record.get("verdict") not in (*health.VERDICTS, health.NO_VERDICT):
        raise schema.MalformedSample("'verdict' is not a verdict")
    if record.get("since") is not None:
        _number(record["since"], "'since'")
    checked = record.get("checked")
    if type(checked) is not list or any(check not in health.CHECK_IDS for check in checked):
        raise schema.MalformedSample("'checked' is not a list of check ids")
    findings = record.get("findings")
    if type(findings) is not list or len(findings) > schema.MAX_FINDINGS:
        raise schema.MalformedSample("'findings' is not a list of findings")
    for finding in findings:
        if type(finding) is not dict or finding.get("check") not in health.CHECK_IDS:
            raise schema.MalformedSample("a finding without a known check")
        gpu = finding.get("gpu")
        if gpu is not None and (type(gpu) is not int or not 0 <= gpu <= schema.MAX_GPU_INDEX):
            raise schema.MalformedSample("a finding's 'gpu' is not a GPU index")
        if finding.get("status") not in health.FINDING_STATUSES:
            raise schema.MalformedSample("a finding's 'status' is not warn, fail or unknown")
        reason = finding.get("reason")
        if type(reason) is not str or len(reason) > schema.MAX_REASON:
            raise schema.MalformedSample("a finding's 'reason' is not a text")
        _number(finding.get("since"), "a finding's 'since'")
    return record


def from_record(record: dict, down: bool = False) -> NodeHealth:
    """The node's health as its entry in the hash says (read_record() checked it)."""
    node = NodeHealth(verdict=record["verdict"], since=record.get("since"), checked=tuple(record["checked"]),
                      down=down)
    for finding in record["findings"]:
        key = (finding["check"], finding.get("gpu"), finding["status"])
        node.findings[key] = Finding(finding["reason"], finding["since"])
    return node


class NodeHealthBook:
    """Every node's health; see the module's docstring."""

    def __init__(self):
        self.nodes: dict[str, NodeHealth] = {}
        self.dirty: set[str] = set()  # nodes whose findings, checks or versions changed since the last tick
        # Per group, per compared version (driver, CUDA, model): how many of its nodes run each value.
        self.versions: dict[str | None, tuple[Counter, ...]] = {}
        # Per group, per version: (value, nodes, of nodes), or None where no value has a majority.
        self.majority: dict[str | None, tuple] = {}
        self.changes: list[HealthChange] = []  # verdict changes the caller has not taken yet
        # Node -> its findings from diagnostics run on the control host (an empty dict: it passed them).
        self.diagnosed: Mapping[str, dict[FindingKey, str]] = {}

    def update(self, name: str, sample: dict) -> None:
        """Take the node's newest sample: note what changed for the next tick()."""
        node = self.nodes.get(name) or self.track(name)
        report = sample.get("health")
        if report is None:
            reported, checked = None, ()
        else:
            reported = {(f["check"], f.get("gpu"), f["status"]): f["reason"] for f in report["findings"]}
            checked = tuple(report["checked"])
        if reported != node.reported or checked != node.reported_checked:
            node.reported, node.reported_checked = reported, checked
            self.dirty.add(name)
        system = sample.get("system")
        versions = None
        if system is not None:
            versions = (system.get("driver"), system.get("cuda"), gpu_model(sample["gpus"]), system.get("group"))
        if versions != node.versions:
            self._count(node.versions, -1)
            self._count(versions, 1)
            node.versions = versions
            self.dirty.add(name)

    def diagnose(self, diagnosed: Mapping[str, dict[FindingKey, str]]) -> None:
        """Take the diagnostics' findings of every node (replacing the last); the nodes whose
        findings differ are judged at the next tick."""
        for name in diagnosed.keys() | self.diagnosed.keys():
            if diagnosed.get(name) != self.diagnosed.get(name) and name in self.nodes:
                self.dirty.add(name)
        self.diagnosed = diagnosed

    def track(self, name: str) -> NodeHealth:
        """Start a node with nothing known of its health: judged at the next tick."""
        node = self.nodes[name] = NodeHealth()
        self.dirty.add(name)
        return node

    def _count(self, versions: tuple | None, step: int) -> None:
        if versions is None:
            return
        *compared, group = versions
        counters = self.versions.setdefault(group, tuple(Counter() for _ in VERSION_LABELS))
        for counter, value in zip(counters, compared, strict=True):
            if value is not None:
                counter[value] += step
                if counter[value] <= 0:
                    del counter[value]
        if not any(counters):
            del self.versions[group]

    def forget(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is not None:
            self._count(node.versions, -1)
        self.dirty.discard(name)

    def _majorities(self) -> dict[str | None, tuple]:
        majorities = {}
        for group, counters in self.versions.items():
            majority: list[tuple | None] = []
            for counter in counters:
                top, total = counter.most_common(1), counter.total()
                # More than half the group, not merely the most: several GPU models in like
                # numbers, or a tie between two drivers (an upgrade half done), flag no one.
                if top and 2 * top[0][1] > total:
                    majority.append((top[0][0], top[0][1], total))
                else:
                    majority.append(None)
            majorities[group] = tuple(majority)
        return majorities

    def skew(self, versions: tuple | None) -> str:
        """version_skew's reason for a node with these versions; empty when they are the majority's."""
        if versions is None:
            return ""
        *compared, group = versions
        where = "the cluster" if group is None else f"group {group}"
        parts = [
            f"{label} {value}, {where} runs {top[0]} ({top[1]} of {top[2]} nodes)"
            for label, value, top in zip(VERSION_LABELS, compared, self.majority.get(group, ()), strict=False)
            if value is not None and top is not None and value != top[0]
        ]
        return "; ".join(parts)[:schema.MAX_REASON]

    def tick(self, now: float, cluster: Mapping, status_changed) -> list[str]:
        """Judge the nodes that changed (all that report versions when the majority moved);
        return the names whose health changed. ``cluster``: node name -> its NodeState."""
        candidates = self.dirty.union(status_changed)
        self.dirty = set()
        majority = self._majorities()
        if majority != self.majority:
            moved = {group for group in majority.keys() | self.majority.keys()
                     if majority.get(group) != self.majority.get(group)}
            self.majority = majority
            candidates.update(name for name, node in self.nodes.items()
                              if node.versions is not None and node.versions[-1] in moved)
        changed = []
        for name in candidates:
            node, known = self.nodes.get(name), cluster.get(name)
            if node is not None and known is not None and self._judge(name, node, known.status == DOWN, now):
                changed.append(name)
        return changed

    def _judge(self, name: str, node: NodeHealth, down: bool, now: float) -> bool:
        changed = down != node.down  # its reason says why it has no verdict
        node.down = down
        if down or node.reported is None:
            wanted: dict[FindingKey, str] = {}
            checked: tuple[str, ...] = ()
            verdict = health.NO_VERDICT
        else:
            wanted = dict(node.reported)
            checked = node.reported_checked
            diagnosed = self.diagnosed.get(name)
            if diagnosed is not None:
                checked = (*checked, DIAGNOSTIC)
                wanted.update(diagnosed)
            if node.versions is not None:
                checked = (*checked, SKEW)
                reason = self.skew(node.versions)
                if reason:
                    wanted[(SKEW, None, health.WARN)] = reason
            verdict = health.verdict(status for _, _, status in wanted)
        findings = {}
        for key, reason in wanted.items():
            held = node.findings.get(key)
            findings[key] = Finding(reason, now if held is None else held.since)
        changed = changed or findings != node.findings or checked != node.checked
        node.findings, node.checked = findings, checked
        if verdict != node.verdict or node.since is None:
            old = node.verdict
            node.verdict, node.since = verdict, now
            if verdict != old:  # a node first judged "unknown" changed nothing worth a row
                self.changes.append(HealthChange(name, now, old, verdict, node.summary()["reason"]))
            changed = True
        if changed:
            node.framed = None
        return changed

    def restore(self, name: str, record: dict, down: bool) -> None:
        """Start the node from its entry in the hash (read_record()), so since-times survive a restart.

        It is judged again at its next sample (or now, when it is down): judged before,
        its version_skew finding would be dropped until its versions are known again.
        """
        node = self.nodes[name] = from_record(record)
        if node.verdict != health.NO_VERDICT:
            # Until its next sample, judge it by what it last reported (version_skew is recomputed).
            node.reported = {key: finding.reason for key, finding in node.findings.items() if key[0] != SKEW}
            node.reported_checked = tuple(check for check in node.checked if check != SKEW)
        if down:
            self.dirty.add(name)

    def take_changes(self) -> list[HealthChange]:
        changes, self.changes = self.changes, []
        return changes
