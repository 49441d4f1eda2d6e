"""The workers' Redis client: one per worker process, closed when the process ends.

Node tasks poll the job's cancel key and stream result rows through it; it is
created on first use, so a forked pool process never inherits its parent's
connections.
"""

import redis
from celery.signals import worker_process_shutdown, worker_shutdown

from gpulse.node_redis import node_redis_client

_client: redis.Redis | None = None


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = node_redis_client()
    return _client


@worker_process_shutdown.connect  # a prefork pool process ends
@worker_shutdown.connect  # the solo pool: the tasks ran in the worker itself
def close_redis_client(**_) -> None:
    global _client
    if _client is not None:
        _client.close()
        _client = None
