"""The per-endpoint cap on webhook attempts in flight, shared by every webhook worker, and the line of
deliveries waiting for a slot.

A Redis sorted set per endpoint holds one member per attempt in flight, scored
by the moment its lease expires: a worker that dies mid-attempt frees its slot
when the lease runs out instead of holding it for ever. The check and the
claim are one script, so two workers never both take the last slot. Expiry is
judged by the Redis server's clock, the one clock every worker shares.

A delivery that finds every slot taken joins the endpoint's line (a second
sorted set, oldest first) in the same script, and the attempt that frees a
slot takes the first of the line out in the script that frees it, to be
queued again: a busy endpoint's deliveries wait without polling, and none is
missed between a full check and a release. Only a slot freed by an expired
lease calls nobody, so a waiting delivery also looks again after a lease's
time (dashboard/alerts/tasks.py).
"""

import uuid
from collections.abc import Callable
from contextlib import contextmanager

from django.conf import settings

from dashboard.redis_client import redis_client
from gpulse.keys import Keys

# KEYS: the endpoint's lease set, its line; ARGV: token, cap, lease seconds, the waiter ("" for none).
_CLAIM = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  if ARGV[4] ~= '' then
    redis.call('ZADD', KEYS[2], 'NX', now_ms, ARGV[4])
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]))
  end
  return 0
end
local lease_ms = math.floor(tonumber(ARGV[3]) * 1000)
redis.call('ZADD', KEYS[1], now_ms + lease_ms, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease_ms)
return 1
"""

# KEYS: the endpoint's lease set, its line; ARGV: token, "1" to take the first waiter out of the line.
# Returns that waiter, or nil.
_RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] ~= '1' then
  return nil
end
local first = redis.call('ZPOPMIN', KEYS[2])
return first[1]
"""

# Past the attempt's own deadline: time to write its row to the database.
LEASE_MARGIN = 30.0
# A line nobody joined for this long is dropped (its waiters look again on their own).
LINE_TTL_MS = 24 * 3600 * 1000


def lease_seconds() -> float:
    return settings.GPULSE_WEBHOOK_TIMEOUT + LEASE_MARGIN


@contextmanager
def endpoint_slot(endpoint_id: int, waiter: str = "", call: Callable[[str], None] | None = None):
    """Yield True holding one of the endpoint's slots, or False when all are taken (hold none).

    ``waiter``: when all are taken, it joins the endpoint's line. ``call``: given the first waiter
    in line when this slot is freed, taken out of the line.
    """
    client = redis_client()
    keys = Keys()
    leases, line = keys.webhook_leases(endpoint_id), keys.webhook_line(endpoint_id)
    token = uuid.uuid4().hex
    cap = settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY
    claimed = bool(client.eval(_CLAIM, 2, leases, line, token, cap, lease_seconds(), waiter, LINE_TTL_MS))
    try:
        yield claimed
    finally:
        if claimed:
            first = client.eval(_RELEASE, 2, leases, line, token, "1" if call is not None else "")
            if first is not None and call is not None:
                call(first.decode() if isinstance(first, bytes) else first)


def leave_line(endpoint_id: int, waiter: str) -> bool:
    """Take ``waiter`` out of the endpoint's line; False when it was not in it (a freed slot called it)."""
    return bool(redis_client().zrem(Keys().webhook_line(endpoint_id), waiter))
