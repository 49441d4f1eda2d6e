"""The workers' Redis client: one per worker process, closed when the process ends.

Node tasks poll the job's cancel key and stream result rows through it; it is
created on first use, so a forked pool process never inherits its parent's
connections.
"""

import redis
from celery.signals import worker_process_shutdown, worker_shutdown

from gpulse.redis_url import redis_url_from_environment

# A Redis that does not answer must fail the task's Redis call, not hang the ranks.
SOCKET_TIMEOUT = 5
CONNECT_TIMEOUT = 2

_client: redis.Redis | None = None


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(
            redis_url_from_environment(),  # REDIS_URL or $GPULSE_REDIS_URL_FILE
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT,
        )
    return _client


@worker_process_shutdown.connect  # a prefork pool process ends
@worker_shutdown.connect  # the solo pool: the tasks ran in the worker itself
def close_redis_client(**_) -> None:
    global _client
    if _client is not None:
        _client.close()
        _client = None
