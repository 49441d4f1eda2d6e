"""The web side's Redis clients: one sync client per process, one asyncio client per event loop.

Every Django-side module (pages, API, /metrics, /healthz, ingest, Celery tasks
of the control worker, websocket consumers) takes its client from here, so
they all share one connection pool and the same timeouts.
"""

import asyncio
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

# A Redis that does not answer must fail a request, not hang it. Blocking reads
# (XREAD BLOCK) must block for less than SOCKET_TIMEOUT.
SOCKET_TIMEOUT = 5
CONNECT_TIMEOUT = 2

_client: redis.Redis | None = None
# An asyncio client is bound to the loop it was created on; weak keys let a
# closed loop's client go with it (tests run one loop per test).
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = weakref.WeakKeyDictionary()


def redis_client() -> redis.Redis:
    """Return this process's client (thread-safe: redis-py pools its connections)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
        )
    return _client


def async_redis_client() -> aioredis.Redis:
    """Return the running event loop's asyncio client."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = _async_clients[loop] = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
        )
    return client
