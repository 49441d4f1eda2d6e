"""Node health as an ingest stage: each node judged once per tick (dashboard/health/node_health.py).

What changed goes to the Redis hash Keys().health (pages and a restarted
ingest read it), to the frames (``health``) and, for verdict changes, to the
database (HealthChange rows, kept through an outage by HealthChangeQueue).
Offers ``board["health"]`` (node -> NodeHealth) to the stages after it, and
judges what ``board["diagnostics"]`` offers (the fabric diagnostics' findings,
dashboard/benchmarks/diagnostics_stage.py) with each node's own.
"""

import logging

import orjson

from dashboard.health.changes import HealthChangeQueue
from dashboard.health.node_health import NodeHealthBook, read_record
from dashboard.live.stages import Stage
from gpulse import schema
from gpulse.status import DOWN

log = logging.getLogger("gpulse.ingest")


class HealthStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.book = NodeHealthBook()
        self.changes = HealthChangeQueue()
        self.changed: list[str] = []  # nodes judged different this tick, for write_redis()
        core.board["health"] = self.book.nodes

    def restore(self) -> None:
        """Start each known node's health from the hash, so the since-times survive a restart;
        a node without a valid entry there is judged afresh."""
        records = self.core.redis.hgetall(self.core.keys.health)
        for name, node in self.core.state.nodes.items():
            raw = records.get(name.encode())
            try:
                record = None if raw is None else read_record(raw)
            except schema.MalformedSample as exc:
                log.warning("node %s: its health in Redis is not valid, judging it afresh: %s", name, exc)
                record = None
            if record is None:
                self.book.track(name)
            else:
                self.book.restore(name, record, node.status == DOWN)

    def sample(self, node, rows) -> None:
        self.book.update(node.name, node.sample)

    def tick(self, now, changed):
        diagnosed = self.core.board.get("diagnostics")
        if diagnosed is not None and diagnosed is not self.book.diagnosed:
            self.book.diagnose(diagnosed)
        self.changed = self.book.tick(now, self.core.state.nodes, changed)
        self.changes.add(self.book.take_changes())
        return self.changed

    def node_fields(self, name: str) -> dict:
        health = self.book.nodes.get(name)
        return {} if health is None or health.since is None else {"health": health.frame_entry()}

    def write_redis(self, pipe) -> None:
        if self.changed:
            records = {name: orjson.dumps(self.book.nodes[name].record()) for name in self.changed}
            pipe.hset(self.core.keys.health, mapping=records)

    def write_database(self, now: float) -> None:
        self.changes.write()

    def forget(self, name: str, pipe) -> None:
        self.book.forget(name)
        pipe.hdel(self.core.keys.health, name)

    def heartbeat(self, beat: dict) -> None:
        beat["health"] = {"pending_changes": len(self.changes.pending), "lost_changes": self.changes.lost}
