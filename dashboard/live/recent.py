"""What pages read once a frame is out: each sampled node's known-nodes entry and recent point, and its
stream trimmed to the cap its collector asks for."""

from collections.abc import Callable, Mapping

import orjson
from redis.client import Pipeline

from dashboard.live.state import NodeState
from gpulse.keys import RECENT_POINTS, TELEMETRY_MAXLEN, Keys

# A node's recent-point list is trimmed on every this-many pushes, to
# RECENT_POINTS minus as many, so it never holds more than RECENT_POINTS: at
# 1,000 nodes an LTRIM per push was nearly half of each tick's Redis commands.
RECENT_TRIM_EVERY = 10
# A node's stream likewise, to TELEMETRY_MAXLEN, on every this-many of its samples, and
# at once when a read took more than one entry of it (a node flooding its stream, or a
# backlog): an XTRIM per sample was 1,000 commands a tick.
STREAM_TRIM_EVERY = 10


class RecentWrites:
    def __init__(self, keys: Keys):
        self.keys = keys
        self.pushes: dict[str, int] = {}  # node -> recent points pushed, to trim every RECENT_TRIM_EVERY

    def forget(self, name: str) -> None:
        self.pushes.pop(name, None)

    def queue(self, pipe: Pipeline, sampled: set[str], nodes: Mapping[str, NodeState], streams: Mapping[str, str],
              flooded: set[str], rows_of: Callable[[str], list]) -> None:
        """Queue the writes for the nodes that sent a sample this tick; ``flooded``: those whose stream
        gave more than one entry in a read (trimmed at once)."""
        if sampled:
            pipe.hset(self.keys.known_nodes, mapping={name: orjson.dumps(nodes[name].known()) for name in sampled})
        pushes = self.pushes
        for name in sampled:
            # The first push trims too: a restarted ingest may find a longer list, or stream.
            count = pushes[name] = pushes.get(name, -1) + 1
            if name in streams and (count % STREAM_TRIM_EVERY == 0 or name in flooded):
                # The node's collector asks for this cap; one that leaves it out and writes more than
                # a sample a read floods only its own stream, and only until here.
                pipe.xtrim(streams[name], maxlen=TELEMETRY_MAXLEN, approximate=True)
            key = self.keys.recent(name)
            pipe.lpush(key, orjson.dumps([nodes[name].ts, rows_of(name)]))
            if count % RECENT_TRIM_EVERY == 0:
                pipe.ltrim(key, 0, RECENT_POINTS - RECENT_TRIM_EVERY - 1)
