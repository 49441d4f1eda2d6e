"""Where samples go: Redis (the contract in docs/ARCHITECTURE.md) or standard output."""

import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import BinaryIO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gpulse.keys import TELEMETRY_MAXLEN, Keys, node_ttl
from gpulse.node_redis import node_redis_client
from gpulse.schema import encode
from gpulse.status import RECONNECT_BACKOFF_MAX

log = logging.getLogger(__name__)

# About ten minutes of one node at 1 Hz per 600; 8-GPU samples are ~3.5 KB, so
# a full buffer stays near 35 MB whatever the fleet size.
DEFAULT_BUFFER_SIZE = 10_000
# Samples per pipeline when a backlog is flushed, so one request stays a few MB.
FLUSH_CHUNK = 5_000
# A sample written this many seconds or more after it was taken carries the
# wait as the entry's "held" field: ingest then tells a sample that waited out
# an outage from one whose node's clock is behind (gpulse.status.place).
HELD_REPORTED = 1.0


class RedisPublisher:
    """XADD each sample to its node's telemetry stream and SET its node's latest key.

    While Redis is unreachable, samples wait in a bounded buffer (the oldest are
    dropped and counted when it is full) and reconnection is tried with
    exponential backoff; the backlog is then written in order. publish() never
    raises for Redis errors, so the sampling loop keeps its cadence.
    """

    def __init__(
        self,
        redis_url: str,
        keys: Keys | None = None,
        maxlen: int = TELEMETRY_MAXLEN,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        backoff_initial: float = 0.5,
        backoff_max: float = RECONNECT_BACKOFF_MAX,
        clock: Callable[[], float] = time.monotonic,
    ):
        # No retries inside redis-py: the buffer and backoff here are the retry,
        # and a blocking retry would stall sampling.
        self.client = node_redis_client(redis_url, retry=Retry(NoBackoff(), 0))
        self.keys = keys or Keys()
        self.maxlen = maxlen
        self.buffer_size = buffer_size
        self.buffer: deque[tuple[str, float, bytes, float]] = deque(maxlen=buffer_size)  # + when buffered
        self.dropped = 0
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.clock = clock
        self._backoff = backoff_initial
        self._retry_at = 0.0
        self._outage_since: float | None = None
        self._dropped_before_outage = 0
        self.where = _describe(self.client)

    @property
    def pending(self) -> int:
        """Samples waiting for Redis."""
        return len(self.buffer)

    def publish(self, samples: list[dict]) -> None:
        overflow = len(self.buffer) + len(samples) - self.buffer_size
        if overflow > 0:
            self.dropped += overflow
        now = self.clock()
        self.buffer.extend((sample["node"], sample["interval"], encode(sample), now) for sample in samples)
        if self._outage_since is not None and self.clock() < self._retry_at:
            return
        self._flush()

    def _flush(self) -> None:
        flushed = 0
        try:
            while self.buffer:
                chunk = list(islice(self.buffer, FLUSH_CHUNK))
                # A transaction, so a connection lost mid-write leaves nothing half
                # written to be sent twice on the next attempt.
                pipe = self.client.pipeline(transaction=True)
                now = self.clock()
                for node, _, payload, buffered in chunk:
                    fields: dict[str, bytes | str] = {"s": payload}
                    if now - buffered >= HELD_REPORTED:
                        fields["held"] = f"{now - buffered:.3f}"
                    pipe.xadd(self.keys.telemetry_stream(node), fields, maxlen=self.maxlen, approximate=True)
                if len(chunk) == len(self.buffer):
                    # Only the newest sample of each node is its "latest"; an older
                    # one would make the node look current with stale readings.
                    newest = {node: (interval, payload) for node, interval, payload, _ in chunk}
                    for node, (interval, payload) in newest.items():
                        pipe.set(self.keys.node(node), payload, ex=node_ttl(interval))
                pipe.execute()
                for _ in chunk:
                    self.buffer.popleft()
                flushed += len(chunk)
        except redis.RedisError as exc:
            self._failed(exc)
            return
        if self._outage_since is not None:
            log.info(
                "Redis at %s reachable again after %.1f s: wrote %d buffered samples, dropped %d",
                self.where, self.clock() - self._outage_since, flushed, self.dropped - self._dropped_before_outage,
            )
            self._outage_since = None
            self._backoff = self.backoff_initial

    def _failed(self, exc: redis.RedisError) -> None:
        now = self.clock()
        if self._outage_since is None:
            self._outage_since = now
            self._dropped_before_outage = self.dropped
            self._backoff = self.backoff_initial
            log.warning(
                "Redis at %s unreachable (%s): buffering up to %d samples and retrying",
                self.where, exc, self.buffer.maxlen,
            )
        else:
            self._backoff = min(self._backoff * 2, self.backoff_max)
        self._retry_at = now + self._backoff

    def close(self) -> None:
        """Try once more to write what is buffered, then disconnect."""
        if self.buffer:
            self._flush()
        self.client.close()


class StdoutPublisher:
    """One JSON line per sample, for `--stdout` and for piping into other tools."""

    def __init__(self, stream: BinaryIO | None = None):
        self.stream = stream if stream is not None else sys.stdout.buffer

    @property
    def pending(self) -> int:
        return 0

    def publish(self, samples: list[dict]) -> None:
        self.stream.write(b"".join(encode(sample) + b"\n" for sample in samples))
        self.stream.flush()

    def close(self) -> None:
        """Leave the stream open: it belongs to the caller."""


def _describe(client: redis.Redis) -> str:
    """Return host:port/db of the client's server, never its password."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
