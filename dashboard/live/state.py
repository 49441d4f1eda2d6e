"""What ingest knows about the cluster right now, and how a node's status is judged."""

from dataclasses import dataclass, field

from gpulse.keys import node_ttl

UP, STALE, DOWN = "up", "stale", "down"


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


@dataclass
class NodeState:
    name: str
    sample: dict  # the latest version-1 sample (gpulse.schema)
    status: str = UP

    @property
    def ts(self) -> float:
        return self.sample["ts"]

    @property
    def interval(self) -> float:
        return self.sample["interval"]


@dataclass
class ClusterState:
    nodes: dict[str, NodeState] = field(default_factory=dict)

    def refresh_statuses(self, now: float) -> list[str]:
        """Re-judge every node at ``now``; return the names whose status changed."""
        changed = []
        for node in self.nodes.values():
            status = node_status(node.ts, node.interval, now)
            if status != node.status:
                node.status = status
                changed.append(node.name)
        return changed
