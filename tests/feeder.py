"""A thread standing in for a node's collector in the browser tests: it writes the node's samples to a running
system's Redis, as a collector does (its telemetry stream and its latest-sample key), once a second."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from gpulse import schema
from gpulse.keys import Keys, node_ttl

INTERVAL_S = 1.0


@contextmanager
def feeding(redis_url: str, node: str, make_sample: Callable[[], dict]) -> Iterator[None]:
    """Send ``make_sample()`` as ``node``'s sample every INTERVAL_S while the block runs."""
    client, keys = redis.Redis.from_url(redis_url), Keys()
    stopped = threading.Event()

    def collector():
        while not stopped.is_set():
            encoded = schema.encode(make_sample())
            client.xadd(keys.telemetry_stream(node), {"s": encoded})
            client.set(keys.node(node), encoded, ex=node_ttl(INTERVAL_S))
            stopped.wait(INTERVAL_S)

    thread = threading.Thread(target=collector, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopped.set()
        thread.join()
