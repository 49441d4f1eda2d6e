"""A node's status, judged from the age of its latest sample: the rule every reader applies."""

from gpulse.keys import node_ttl

UP, STALE, DOWN = "up", "stale", "down"
NODE_STATUSES = (UP, STALE, DOWN)


def node_status(ts: float, interval: float, now: float) -> str:
    """Judge a node by the age of its latest sample.

    A node is stale once it is more than two intervals late (one sample
    missed, plus jitter), and down once its latest key would have expired
    (gpulse.keys.node_ttl, about three intervals).
    """
    age = now - ts
    if age > node_ttl(interval):
        return DOWN
    if age > 2 * interval:
        return STALE
    return UP
