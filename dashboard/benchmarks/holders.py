"""Who holds a node's GPUs now: the launch form's warning before a benchmark shares them.

A benchmark on a node whose GPUs a Slurm job, a pod or a process holds runs
beside that work: it slows the job and measures less than the links can do.
The holders are the GPUs' owners as usage accounting defines them
(gpulse.usage.owner), read from the node's latest sample.
"""

from collections import Counter

from gpulse.usage import NOBODY, Owner, owner


def describe(who: Owner) -> str:
    """'Slurm job 41002 (user alice)', 'pod ml/trainer-0 (user bob)', 'user carol', or 'a process'."""
    named = f"Slurm job {who.job}" if who.job else f"pod {who.pod}" if who.pod else ""
    if not named:
        return f"user {who.user}" if who.user else "a process"
    return f"{named} (user {who.user})" if who.user else named


def holders(gpus: list[dict]) -> list[str]:
    """Return who holds the node's GPUs, most GPUs first: ["Slurm job 41002 (user alice) on 8 of 8 GPUs"];
    empty when no GPU is allocated."""
    held = Counter(who for who in map(owner, gpus) if who != NOBODY)
    return [f"{describe(who)} on {count} of {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
            for who, count in held.most_common()]


def held_nodes(cluster: dict[str, dict], nodes: list[str]) -> dict[str, str]:
    """Return each of ``nodes`` whose GPUs someone holds, with who (holders(), joined), in the order given."""
    found = {name: holders(cluster[name]["gpus"]) for name in nodes if name in cluster}
    return {name: "; ".join(who) for name, who in found.items() if who}
