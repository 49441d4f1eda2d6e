"""One asyncio Redis client per event loop for the web process."""

import asyncio
import weakref

import redis.asyncio as aioredis
from django.conf import settings

# A client is bound to the loop it was created on; weak keys let a closed
# loop's client go with it (tests run one loop per test).
_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = weakref.WeakKeyDictionary()


def get_client() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    return client
