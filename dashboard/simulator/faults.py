"""Fault injection for the simulated fleet: the Redis hash the simulator reads.

Field "<node>" (whole node) or "<node>/<gpu>", value = fault name; "clear"
removes the target's fields, and for a whole node also its GPUs' fields.
"""

import redis
from django.conf import settings

from gpulse.keys import Keys

# The collector's simulated source reads these (collectors/simulated.py).
FAULT = r"^(hot|xid|xid:[1-9][0-9]{0,4}|ecc|lost|dead|clear)$"
NODE_NAME = r"^[^/\s]+$"


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)


def set_fault(node: str, gpu: int | None, fault: str) -> list[str]:
    """Apply ``fault`` (or "clear") to the target; return the fields written or removed."""
    key = Keys().simulator_faults
    field = node if gpu is None else f"{node}/{gpu}"
    client = _client()
    try:
        if fault != "clear":
            client.hset(key, field, fault)
            return [field]
        fields = [field]
        if gpu is None:
            fields += [f.decode() for f in client.hkeys(key) if f.decode().startswith(f"{node}/")]
        client.hdel(key, *fields)
        return fields
    finally:
        client.close()


def active_faults() -> dict[str, str]:
    client = _client()
    try:
        return {k.decode(): v.decode() for k, v in client.hgetall(Keys().simulator_faults).items()}
    finally:
        client.close()
