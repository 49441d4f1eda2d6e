"""Fault injection for the simulated fleet: the Redis hash its collectors read.

Field "<node>" (whole node) or "<node>/<gpu>", value = fault name (gpulse/faults.py);
"clear" removes the target's fields, and for a whole node also its GPUs' fields.
Only a node the cluster has seen (ingest's known-nodes hash) takes a fault: one
on a misspelt name would be listed as active while nothing happens.
"""

from dashboard.redis_client import redis_client
from gpulse.keys import Keys


class UnknownNode(ValueError):
    """The cluster has never seen the named node."""


def set_fault(node: str, gpu: int | None, fault: str) -> list[str]:
    """Apply ``fault`` (or "clear") to the target; return the fields written or removed.

    Raise UnknownNode for a node the cluster has never seen, unless ``fault`` is
    "clear" and faults are left on it (a node ingest has since forgotten).
    """
    keys = Keys()
    key = keys.simulator_faults
    field = node if gpu is None else f"{node}/{gpu}"
    client = redis_client()
    known = client.hexists(keys.known_nodes, node)
    if fault != "clear":
        if not known:
            raise UnknownNode(f"the cluster has never seen a node named {node!r}")
        client.hset(key, field, fault)
        return [field]
    present = [f.decode() for f in client.hkeys(key)]
    if not known and not any(f == node or f.startswith(f"{node}/") for f in present):
        raise UnknownNode(f"the cluster has never seen a node named {node!r}")
    fields = [field]
    if gpu is None:
        fields += [f for f in present if f.startswith(f"{node}/")]
    client.hdel(key, *fields)
    return fields


def active_faults() -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis_client().hgetall(Keys().simulator_faults).items()}
