"""The per-endpoint cap on webhook attempts in flight, shared by every webhook worker.

A Redis sorted set per endpoint holds one member per attempt in flight, scored
by the moment its lease expires: a worker that dies mid-attempt frees its slot
when the lease runs out instead of holding it for ever. The check and the
claim are one script, so two workers never both take the last slot. Expiry is
judged by the Redis server's clock, the one clock every worker shares.
"""

import uuid
from contextlib import contextmanager

from django.conf import settings

from dashboard.redis_client import redis_client
from gpulse.keys import Keys

# KEYS[1]: the endpoint's lease set; ARGV: token, cap, lease seconds.
_CLAIM = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
local lease_ms = math.floor(tonumber(ARGV[3]) * 1000)
redis.call('ZADD', KEYS[1], now_ms + lease_ms, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease_ms)
return 1
"""

# Past the attempt's own deadline: time to write its row to the database.
LEASE_MARGIN = 30.0


def lease_seconds() -> float:
    return settings.GPULSE_WEBHOOK_TIMEOUT + LEASE_MARGIN


@contextmanager
def endpoint_slot(endpoint_id: int):
    """Yield True holding one of the endpoint's slots, or False when all are taken (hold none)."""
    client = redis_client()
    key = Keys().webhook_leases(endpoint_id)
    token = uuid.uuid4().hex
    cap = settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY
    claimed = bool(client.eval(_CLAIM, 1, key, token, cap, lease_seconds()))
    try:
        yield claimed
    finally:
        if claimed:
            client.zrem(key, token)
