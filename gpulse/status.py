"""A node's status and where its samples sit in time: the rules every reader applies.

Freshness is judged by arrival time (when the node's newest sample reached the
Redis stream, on Redis' clock), never by the node's own ``ts``: a node whose
clock is off still reports every interval, and must not look down or stale.
"""

from gpulse.keys import node_ttl

UP, STALE, DOWN = "up", "stale", "down"
NODE_STATUSES = (UP, STALE, DOWN)
# Worse is later: a status may only move right while judgements are held.
SEVERITY = {UP: 0, STALE: 1, DOWN: 2}

# A node whose clock differs from Redis' by more than this is flagged "clock
# skew" and its samples are placed at their arrival time (GPULSE_MAX_CLOCK_SKEW).
DEFAULT_MAX_CLOCK_SKEW = 30.0
# Collectors retry an unreachable Redis at most this many seconds apart
# (collectors.publisher), then write what they buffered.
RECONNECT_BACKOFF_MAX = 5.0


def node_status(arrived: float, interval: float, now: float) -> str:
    """Judge a node by the age of its newest sample's arrival.

    A node is stale once it is more than two intervals late (one sample
    missed, plus jitter), and down once its latest key would have expired
    (gpulse.keys.node_ttl, about three intervals).
    """
    age = now - arrived
    if age > node_ttl(interval):
        return DOWN
    if age > 2 * interval:
        return STALE
    return UP


def reconnect_grace(interval: float) -> float:
    """Seconds after Redis is back in which a node's silence is not judged.

    Its collector may wait out its reconnect backoff, then its next sample,
    before it writes the samples it buffered during the outage.
    """
    return RECONNECT_BACKOFF_MAX + 2 * interval


def place(ts: float, taken: float, max_skew: float) -> tuple[float, float | None]:
    """Return (where a sample sits in time, its clock skew or None).

    ``taken`` is when the sample was taken on Redis' clock (its arrival less
    the time its collector held it). Within ``max_skew`` the node's own ``ts``
    places it; beyond, ``taken`` does and the skew (ts − taken, seconds) is
    returned so the node can be flagged.
    """
    skew = ts - taken
    if -max_skew <= skew <= max_skew:
        return ts, None
    return taken, skew
