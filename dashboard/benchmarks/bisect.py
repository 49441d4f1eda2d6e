"""Bisection: name the slow node of a slow all-reduce in O(log N) jobs.

Each round of halving runs an all-reduce over each half of the current set at
once (the halves share no node). When the slower half's busbw is below
``fraction`` × the faster half's, the slower half is the new set and the
faster one joins the known-good nodes; when neither is that much slower, the
bisection ends without a suspect (every link is as slow, or none is). Once the
set has at most FINAL_SIZE nodes, each of them runs a two-node all-reduce
with a known-good partner (as many at once as there are good nodes), and those
below ``fraction`` × the best of these pairs are the suspects. A job that
failed counts as the slower side: a node that breaks a collective is a suspect
too. The state between rounds is a dict (the sweep's ``result``), so a
restarted control worker carries on.
"""

FINAL_SIZE = 3
MIN_NODES = 4  # two halves of at least two nodes: a one-node all-reduce crosses no link


def halves(nodes: list[str]) -> list[list[str]]:
    middle = len(nodes) // 2
    return [nodes[:middle], nodes[middle:]]


def start(nodes: list[str]) -> tuple[list[list[str]], dict]:
    """The first round's node sets, and the state the rounds carry."""
    return halves(nodes), {"steps": [], "good": [], "candidates": None, "tested": {}}


def _slower(busbw: list[float | None]) -> int:
    """The index of the slower of two results; a failed job (None) is the slower."""
    if busbw[0] is None:
        return 0
    if busbw[1] is None:
        return 1
    return 0 if busbw[0] <= busbw[1] else 1


def next_round(state: dict, groups: list[list[str]], busbw: list[float | None],
               fraction: float) -> tuple[list[list[str]] | None, dict]:
    """Given the ended round's node sets and each one's busbw (None: its job failed), return the next
    round's node sets (None when the bisection is over) and the new state; once over, the state has
    ``suspects`` and ``conclusion``."""
    ended = [{"nodes": nodes, "busbw": value} for nodes, value in zip(groups, busbw, strict=True)]
    state = {**state, "steps": [*state["steps"], ended]}
    if state["candidates"] is not None:
        state["tested"] = {**state["tested"], **{group[0]: value for group, value in zip(groups, busbw, strict=True)}}
        return _test_candidates(state, fraction)
    slower = _slower(busbw)
    faster_busbw, slower_busbw = busbw[1 - slower], busbw[slower]
    if faster_busbw is None:
        state.update(suspects=[], conclusion="both halves' all-reduce failed: the fault is not in one half")
        return None, state
    if slower_busbw is not None and slower_busbw >= fraction * faster_busbw:
        state.update(suspects=[], conclusion=f"neither half is below {fraction * 100:.0f} % of the other:"
                                             " the slowness is not in one node")
        return None, state
    state["good"] = [*state["good"], *groups[1 - slower]]
    suspect_set = groups[slower]
    if len(suspect_set) > FINAL_SIZE:
        return halves(suspect_set), state
    state["candidates"] = suspect_set
    return _test_candidates(state, fraction)


def _test_candidates(state: dict, fraction: float) -> tuple[list[list[str]] | None, dict]:
    """Pair the untested candidates with good nodes, or, all tested, name the suspects."""
    untested = [node for node in state["candidates"] if node not in state["tested"]]
    if untested:
        return [[node, partner] for node, partner in zip(untested, state["good"], strict=False)], state
    measured = {node: value for node, value in state["tested"].items() if value is not None}
    best = max(measured.values(), default=None)
    suspects = sorted(node for node, value in state["tested"].items()
                      if value is None or (best is not None and value < fraction * best))
    if suspects:
        verb = "is" if len(suspects) == 1 else "are"
        conclusion = f"{', '.join(suspects)} {verb} below {fraction * 100:.0f} % of the best pairing with a good node"
    else:
        conclusion = (f"no node of {', '.join(state['candidates'])} is below {fraction * 100:.0f} % of the others"
                      " with a good node: the slow half's slowness is between them")
    state.update(suspects=suspects, conclusion=conclusion)
    return None, state
