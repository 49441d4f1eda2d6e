"""A fabric sweep's arithmetic: which pairs run in which round, and what the measured matrix says.

Pairs: the circle method of round-robin tournaments. One node stays put and
the others rotate past it, so each of the N−1 rounds pairs every node at most
once (an odd N gets a bye each round) and every pair meets exactly once.

Flags, as operators read an nccl-tests matrix: a link is slow below
``fraction`` × the median of all links; a node is slow when the median of its
own links is, so one bad node (every link of it slow) is named as a node and a
single bad cable (one slow link between good nodes) as a link only.
"""

import statistics
from dataclasses import dataclass

Pair = tuple[str, str]


def round_robin(nodes: list[str]) -> list[list[Pair]]:
    """Return the rounds of pairs over ``nodes`` (at least 2): N−1 rounds for an even N, N for an odd one."""
    players: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


@dataclass(frozen=True)
class Verdict:
    median: float | None  # GB/s over every measured link
    slow_links: list[Pair]  # below fraction × median
    slow_nodes: list[str]  # their own links' median below fraction × median
    node_medians: dict[str, float]


def judge(links: dict[Pair, float], fraction: float) -> Verdict:
    """Flag the slow links and nodes of ``links`` (busbw of each measured pair; a failed pair is absent)."""
    if not links:
        return Verdict(None, [], [], {})
    median = statistics.median(links.values())
    floor = fraction * median
    by_node: dict[str, list[float]] = {}
    for (a, b), value in links.items():
        by_node.setdefault(a, []).append(value)
        by_node.setdefault(b, []).append(value)
    node_medians = {node: statistics.median(values) for node, values in by_node.items()}
    return Verdict(
        median=median,
        slow_links=sorted(pair for pair, value in links.items() if value < floor),
        slow_nodes=sorted(node for node, value in node_medians.items() if value < floor),
        node_medians=node_medians,
    )


def pairs_result(measured: dict[Pair, float], failed: dict[Pair, str], fraction: float) -> dict:
    """A sweep of every pair's ``result``: its links and failed pairs, the median and what was flagged."""
    verdict = judge(measured, fraction)
    return {
        "links": [{"a": a, "b": b, "busbw": value} for (a, b), value in sorted(measured.items())],
        "failed": [{"a": a, "b": b, "reason": reason} for (a, b), reason in sorted(failed.items())],
        "median": verdict.median,
        "node_medians": verdict.node_medians,
        "slow_links": [list(pair) for pair in verdict.slow_links],
        "slow_nodes": verdict.slow_nodes,
    }
