"""What ingest knows about the cluster right now (gpulse.status judges each node)."""

from dataclasses import dataclass, field

from gpulse.status import UP, node_status


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
