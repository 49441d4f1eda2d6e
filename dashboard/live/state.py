"""What ingest knows about the cluster right now (gpulse.status judges each node)."""

import logging
from dataclasses import dataclass, field

from dashboard.live.identity import CollectorIdentity
from gpulse import schema
from gpulse.status import DEFAULT_MAX_CLOCK_SKEW, SEVERITY, UP, node_status, place, reconnect_grace

log = logging.getLogger("gpulse.ingest")


@dataclass
class NodeState:
    name: str
    sample: dict  # the latest version-1 sample (gpulse.schema)
    arrived: float  # when its newest sample reached the stream (Redis' clock): its freshness
    placed: float  # where its latest sample sits in time: its own ts, or when taken if its clock is off
    skew: float | None = None  # seconds its clock is off (ts − when taken) beyond the max skew, else None
    status: str = UP
    identity: CollectorIdentity = field(default_factory=CollectorIdentity)

    @property
    def ts(self) -> float:
        """Where the latest sample is placed: frames, recent points and rollups use this."""
        return self.placed

    @property
    def interval(self) -> float:
        return self.sample["interval"]

    def known(self) -> dict:
        """What Redis remembers of the node (Keys.known_nodes), for a restarted ingest and the API."""
        return {"ts": self.placed, "interval": self.interval, "arrived": self.arrived, "skew": self.skew,
                "boot": self.identity.boot, "restarts": self.identity.restarts, "twin": self.identity.twin_since}


def remembered(raw: bytes) -> dict:
    """A node's entry in the known-nodes hash (NodeState.known), checked as a sample is:
    raise MalformedSample.

    Ingest writes it, but it lives in Redis, which any holder of the password can write.
    """
    seen = schema.json_object(raw)
    seen.setdefault("arrived", seen.get("ts"))  # an ingest before arrival times wrote none
    for name in ("ts", "arrived"):
        value = seen[name]
        if type(value) not in (int, float) or not 0 <= value <= schema.MAX_TS:
            raise schema.MalformedSample(f"{name!r} is not a unix time")
    skew = seen.get("skew")
    if skew is not None and (type(skew) not in (int, float) or abs(skew) > schema.MAX_TS):
        raise schema.MalformedSample("'skew' is not seconds")
    twin = seen.get("twin")  # since when two collectors report as the node, else None
    if twin is not None and (type(twin) not in (int, float) or not 0 <= twin <= schema.MAX_TS):
        raise schema.MalformedSample("'twin' is not a unix time")
    boot, restarts = seen.get("boot"), seen.get("restarts", 0)
    if boot is not None and (type(boot) is not str or schema.BOOT.fullmatch(boot) is None):
        raise schema.MalformedSample("'boot' is not a collector run id")
    if type(restarts) is not int or restarts < 0:
        raise schema.MalformedSample("'restarts' is not a count")
    return seen


def remembered_or_none(raw: bytes | None) -> dict | None:
    """remembered(), for readers that judge a node by its own key when the entry is missing or not valid."""
    if raw is None:
        return None
    try:
        return remembered(raw)
    except schema.MalformedSample:
        return None


@dataclass
class ClusterState:
    nodes: dict[str, NodeState] = field(default_factory=dict)
    max_skew: float = DEFAULT_MAX_CLOCK_SKEW
    # After Redis came back: when (ingest's clock), and whether the stream is still being caught up.
    # Meanwhile no node's status worsens: collectors are still writing what they buffered.
    resumed_at: float | None = None
    catching_up: bool = False

    def resume(self, names: list[str], known: dict[bytes, bytes], latest: list[bytes | None]) -> None:
        """Take the nodes as Redis remembers them: ``known``, the known-nodes hash; ``latest``, each
        name's newest sample (or None). A node whose entry is not valid is left out, and logged."""
        for name, raw in zip(names, latest, strict=True):
            try:
                seen = remembered(known[name.encode()])
            except schema.MalformedSample as exc:
                log.warning("forgetting node %s: what Redis remembers of it is not valid: %s", name, exc)
                continue
            try:
                sample = schema.parse(raw) if raw else None
            except schema.MalformedSample:
                sample = None
            if sample is None:
                sample = {"v": 1, "node": name, "ts": seen["ts"], "interval": seen["interval"], "gpus": []}
                try:
                    schema.validate(sample)
                except schema.MalformedSample as exc:
                    log.warning("forgetting node %s: what Redis remembers of it is not valid: %s", name, exc)
                    continue
            arrived = seen["arrived"]
            placed, skew = place(sample["ts"], arrived, self.max_skew)
            identity = CollectorIdentity(seen.get("boot"), seen.get("restarts", 0))
            self.nodes[name] = NodeState(name, sample, arrived, placed, skew, identity=identity)

    def refresh_statuses(self, now: float) -> list[str]:
        """Re-judge every node at ``now``; return the names whose status changed."""
        changed = []
        resumed = now if self.catching_up else self.resumed_at
        for node in self.nodes.values():
            status = node_status(node.arrived, node.interval, now)
            if status == node.status:
                continue
            if (resumed is not None and SEVERITY[status] > SEVERITY[node.status]
                    and now < resumed + reconnect_grace(node.interval)):
                continue  # its collector may not have written its backlog yet
            node.status = status
            changed.append(node.name)
        return changed

    def hold(self, now: float) -> None:
        """Redis is back: hold down/stale judgements until the stream is caught up and collectors had time."""
        self.resumed_at = now
        self.catching_up = True
