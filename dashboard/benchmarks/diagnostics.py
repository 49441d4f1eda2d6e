"""What finished fabric sweeps and bisections say of each node, as the health check ``fabric``.

A node's newest diagnostic decides (gpulse/health.py, "fabric"):

- a sweep of every pair: a slow node (the median of its links below the flag
  fraction of all links' median) fails, naming its median; a slow link
  between two nodes that are not slow (one bad cable) warns on both ends,
  naming it; every other node with a measured link passes. A node whose pairs all failed
  was not measured: its last finding stands.
- a bisection: the suspects fail with its conclusion; the nodes it found good
  (a faster half, or a candidate that paired well) pass. One that ended without
  a suspect concludes nothing of a single node.

A finding holds until a later diagnostic over the node passes it, across
restarts: it is read back from the sweeps in the database.
"""

from dataclasses import dataclass

from dashboard.benchmarks.models import FabricSweep
from gpulse import health, schema
from gpulse.health import FindingKey

CHECK = "fabric"


@dataclass(frozen=True)
class NodeDiagnosis:
    finished: float  # unix seconds: the diagnostic that decided it ended then
    findings: dict[FindingKey, str]  # empty: passed


def _bounded(text: str) -> str:
    return text[:schema.MAX_REASON]


def _pairs(sweep_id: int, result: dict, fraction: float) -> dict[str, dict[FindingKey, str]]:
    median = result.get("median")
    node_medians = result.get("node_medians") or {}
    if not median:
        return {}
    diagnosed: dict[str, dict[FindingKey, str]] = {node: {} for node in node_medians}
    slow_nodes = set(result.get("slow_nodes", []))
    slow_links: dict[str, list[str]] = {}
    by_pair = {(link["a"], link["b"]): link["busbw"] for link in result.get("links", [])}
    for a, b in result.get("slow_links", []):
        value = by_pair.get((a, b))
        if value is None or a in slow_nodes or b in slow_nodes:
            continue  # a slow node's links are slow because of it: the good end is not to blame
        for node, other in ((a, b), (b, a)):
            slow_links.setdefault(node, []).append(f"link to {other} {value:.1f} GB/s ({value / median:.0%})")
    for node, links in slow_links.items():
        diagnosed[node][(CHECK, None, health.WARN)] = _bounded(
            f"fabric sweep {sweep_id}: {'; '.join(links)} of the median {median:.1f} GB/s, "
            f"below {fraction:.0%}")
    for node in slow_nodes:
        own = node_medians.get(node)
        if own is None:
            continue
        diagnosed[node] = {(CHECK, None, health.FAIL): _bounded(
            f"fabric sweep {sweep_id}: the median of its links {own:.1f} GB/s is {own / median:.0%} of all "
            f"links' {median:.1f} GB/s, below {fraction:.0%}")}
    return diagnosed


def _bisection(sweep_id: int, result: dict) -> dict[str, dict[FindingKey, str]]:
    suspects = result.get("suspects") or []
    if not suspects:
        return {}
    candidates = result.get("candidates") or []
    diagnosed: dict[str, dict[FindingKey, str]] = {
        node: {} for node in [*result.get("good", []), *candidates] if node not in suspects}
    reason = _bounded(f"bisection {sweep_id}: {result.get('conclusion', '')}")
    for node in suspects:
        diagnosed[node] = {(CHECK, None, health.FAIL): reason}
    return diagnosed


def diagnose(sweep_id: int, kind: str, result: dict | None, fraction: float) -> dict[str, dict[FindingKey, str]]:
    """Node -> its fabric findings (empty: passed) for the nodes a succeeded sweep decided."""
    if not result:
        return {}
    return _bisection(sweep_id, result) if kind == FabricSweep.BISECT else _pairs(sweep_id, result, fraction)


def apply(book: dict[str, NodeDiagnosis], finished: float, diagnosed: dict[str, dict[FindingKey, str]]) -> set[str]:
    """Take one diagnostic's findings into ``book`` where it is newer than what decided the node;
    return the nodes whose findings changed."""
    changed = set()
    for node, findings in diagnosed.items():
        held = book.get(node)
        if held is not None and held.finished > finished:
            continue  # a newer diagnostic already decided this node
        if held is None or held.findings != findings:
            changed.add(node)
        book[node] = NodeDiagnosis(finished, findings)
    return changed
