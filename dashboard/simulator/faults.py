"""Fault injection for the simulated fleet: the Redis hash its collectors read.

Field "<node>" (whole node) or "<node>/<gpu>", value = fault name (gpulse/faults.py);
"clear" removes the target's fields, and for a whole node also its GPUs' fields.
"""

from dashboard.redis_client import redis_client
from gpulse.keys import Keys


def set_fault(node: str, gpu: int | None, fault: str) -> list[str]:
    """Apply ``fault`` (or "clear") to the target; return the fields written or removed."""
    key = Keys().simulator_faults
    field = node if gpu is None else f"{node}/{gpu}"
    client = redis_client()
    if fault != "clear":
        client.hset(key, field, fault)
        return [field]
    fields = [field]
    if gpu is None:
        fields += [f.decode() for f in client.hkeys(key) if f.decode().startswith(f"{node}/")]
    client.hdel(key, *fields)
    return fields


def active_faults() -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis_client().hgetall(Keys().simulator_faults).items()}
