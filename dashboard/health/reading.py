"""Read every node's health as the health stage last wrote it (Redis hash Keys().health), for the API,
/metrics and pages."""

import logging
import time

from dashboard.health.node_health import NodeHealth, from_record, read_record
from dashboard.live.state import remembered_or_none
from dashboard.redis_client import redis_client
from gpulse import schema
from gpulse.keys import Keys
from gpulse.status import DOWN, node_status

log = logging.getLogger(__name__)


def _is_down(seen: dict | None, now: float) -> bool:
    if seen is None:
        return True
    interval = seen.get("interval")
    if not isinstance(interval, (int, float)) or interval <= 0:
        return True
    return node_status(seen["arrived"], float(interval), now) == DOWN


def _health(name: str, raw: bytes | None, seen: dict | None, now: float) -> NodeHealth:
    """The node's health as ingest last wrote it; no verdict when there is none or it is not valid."""
    down = _is_down(seen, now)
    if raw is not None:
        try:
            return from_record(read_record(raw), down)
        except schema.MalformedSample as exc:
            log.warning("node %s: its health in Redis is not valid: %s", name, exc)
    return NodeHealth(down=down)


def read_health() -> dict[str, NodeHealth]:
    """Every known node's health (Keys().health, written by ingest), by name."""
    keys = Keys()
    client = redis_client()
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.known_nodes)
    pipe.hgetall(keys.health)
    known, records = pipe.execute()
    now = time.time()
    return {
        name.decode(): _health(name.decode(), records.get(name), remembered_or_none(seen), now)
        for name, seen in sorted(known.items())
    }


def read_node_health(name: str) -> NodeHealth | None:
    """The node's health, or None if gpulse has never heard of it."""
    keys = Keys()
    pipe = redis_client().pipeline(transaction=False)
    pipe.hget(keys.known_nodes, name)
    pipe.hget(keys.health, name)
    seen, raw = pipe.execute()
    if seen is None and raw is None:
        return None
    return _health(name, raw, remembered_or_none(seen), time.time())
