"""Read the cluster's latest state from Redis, for the API, /metrics and pages."""

import logging
import time

import orjson

from dashboard.live.state import remembered_or_none
from dashboard.redis_client import redis_client
from gpulse import schema
from gpulse.keys import Keys
from gpulse.status import DOWN, node_status

log = logging.getLogger(__name__)


def node_view(name: str, raw: bytes | None, seen: dict | None, now: float) -> dict:
    """One node as the API shows it; a down node carries no GPU values.

    Its status is judged by when ingest last received a sample from it
    (``arrived``), never by its own clock; ``clock_skew`` is how far that
    clock is off (seconds) while beyond GPULSE_MAX_CLOCK_SKEW, else null.
    ``boot`` and ``restarts`` are its collector's run and the restarts ingest
    saw; ``twin_collectors`` since when a second collector reports as this node
    (dashboard.live.identity), else null. Collectors write a node's key themselves: one the sample contract
    rejects shows as down with the reason, never as an error page or a failed scrape.
    """
    seen = seen or {}
    identity = {"clock_skew": seen.get("skew"), "boot": seen.get("boot"), "restarts": seen.get("restarts", 0),
                "twin_collectors": seen.get("twin")}
    try:
        sample = schema.parse(raw) if raw is not None else None
    except schema.MalformedSample as exc:
        return {"node": name, "status": DOWN, "ts": seen.get("ts"), "gpus": [], **identity,
                "error": f"latest sample rejected: {exc}"}
    if sample is None:
        return {"node": name, "status": DOWN, "ts": seen.get("ts"), "gpus": [], **identity}
    # Its key exists, so it arrived within the key's lifetime; before ingest recorded it, judge by ts.
    arrived = seen.get("arrived", sample["ts"])
    return {
        "node": name,
        "status": node_status(arrived, sample["interval"], now),
        "ts": sample["ts"] if identity["clock_skew"] is None else seen["ts"],
        "interval": sample["interval"],
        "gpus": sample["gpus"],
        "host": sample.get("host"),
        **identity,
    }


def read_cluster() -> list[dict]:
    keys = Keys()
    client = redis_client()
    known = {name.decode(): remembered_or_none(value) for name, value in client.hgetall(keys.known_nodes).items()}
    names = sorted(known)
    latest = client.mget([keys.node(name) for name in names]) if names else []
    now = time.time()
    return [node_view(name, raw, known[name], now) for name, raw in zip(names, latest, strict=True)]


def read_node(name: str) -> dict | None:
    """Return the node, or None if gpulse has never heard of it."""
    keys = Keys()
    client = redis_client()
    raw = client.get(keys.node(name))
    seen = client.hget(keys.known_nodes, name)
    if raw is None and seen is None:
        return None
    return node_view(name, raw, remembered_or_none(seen), time.time())


def read_recent(name: str) -> list:
    """Return the node's recent compact points, oldest first."""
    points = redis_client().lrange(Keys().recent(name), 0, -1)
    return [orjson.loads(point) for point in reversed(points)]


def read_probes(name: str) -> list[dict]:
    """Return the node's recent bandwidth probe results, oldest first by their own time."""
    records = redis_client().lrange(Keys().probe_history(name), 0, -1)
    probes = []
    for record in reversed(records):
        try:
            probes.append(schema.read_probe(record))
        except schema.MalformedSample:
            continue  # written by the node: one that is not valid is left out
    # The history is in the order they were written, and a probe can be written after a newer one
    # (a slow publish, a backfill): the probe chart's times must ascend.
    probes.sort(key=lambda probe: probe["ts"])
    return probes
