"""The node side's Redis client builder: the collector, its probes and the node
worker connect through it, with the same timeouts.

The URL (its ACL user, password and TLS by ``rediss://``) comes from the caller
(a collector's --redis-url-file) or, by default, from the environment
(gpulse/redis_url.py). The control host builds its clients in
dashboard/redis_client.py.
"""

import redis

from gpulse.redis_url import redis_url_from_environment

# A Redis that does not answer must fail the call, not hang a task's ranks or the sampling loop.
SOCKET_TIMEOUT = 5
CONNECT_TIMEOUT = 2


def node_redis_client(
    url: str | None = None, *, socket_timeout: float = SOCKET_TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT,
    **options,
) -> redis.Redis:
    """A client of ``url`` (default: REDIS_URL or $GPULSE_REDIS_URL_FILE); ``options`` go to redis-py as they are."""
    return redis.Redis.from_url(
        redis_url_from_environment() if url is None else url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        **options,
    )
