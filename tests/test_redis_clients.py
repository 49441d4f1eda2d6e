"""The shared Redis clients: one per process (web, worker), one per event loop (web async), with timeouts."""

import asyncio

from celery.signals import worker_process_shutdown, worker_shutdown

from dashboard import redis_client as web
from gpulse import node_redis
from workers import redis_client as worker


def test_the_web_process_shares_one_client_with_timeouts(redis_client):
    client = web.redis_client()
    assert client is web.redis_client() and client.ping()
    options = client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (web.SOCKET_TIMEOUT, web.CONNECT_TIMEOUT)


def test_each_event_loop_gets_its_own_async_client(redis_client):
    async def two_calls():
        first = web.async_redis_client()
        assert await first.ping()
        return first, web.async_redis_client()

    first, again = asyncio.run(two_calls())
    other, _ = asyncio.run(two_calls())
    assert first is again and other is not first
    assert first.connection_pool.connection_kwargs["socket_timeout"] == web.SOCKET_TIMEOUT


def test_the_worker_client_is_closed_when_the_worker_or_its_pool_process_stops(redis_client):
    for signal in (worker_shutdown, worker_process_shutdown):
        client = worker.redis_client()
        assert client.ping() and client is worker.redis_client()
        signal.send(sender=None)
        assert worker.redis_client() is not client
    options = worker.redis_client().connection_pool.connection_kwargs
    assert options["socket_timeout"] == node_redis.SOCKET_TIMEOUT
    assert options["socket_connect_timeout"] == node_redis.CONNECT_TIMEOUT
