"""The publishers: the Redis contract, buffering through an outage, JSON lines."""

import io
import logging
import time

import pytest
import redis

from collectors.publisher import RedisPublisher, StdoutPublisher
from devtools.redis_server import EmbeddedRedis
from gpulse.keys import Keys
from gpulse.schema import encode, parse


def sample(node: str, ts: float, interval: float = 1.0) -> dict:
    return {"v": 1, "node": node, "ts": ts, "interval": interval, "host": {"cpu_util": 1.0},
            "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "util": 50, "temp": 40}]}


def stream(client, *nodes: str) -> list[dict]:
    """The samples in these nodes' telemetry streams, node by node."""
    return [parse(fields[b"s"]) for node in nodes for _, fields in client.xrange(Keys().telemetry_stream(node))]


def test_it_writes_each_sample_to_the_stream_and_the_node_key_with_a_ttl(redis_client, redis_url):
    publisher = RedisPublisher(redis_url, Keys())
    batch = [sample("gpu-01", 100.0), sample("gpu-02", 100.0, interval=5.0)]
    publisher.publish(batch)
    publisher.close()

    assert stream(redis_client, "gpu-01", "gpu-02") == batch
    assert redis_client.get("gpulse:node:gpu-01") == encode(batch[0])
    assert 1 <= redis_client.ttl("gpulse:node:gpu-01") <= 3
    assert 13 <= redis_client.ttl("gpulse:node:gpu-02") <= 15
    assert publisher.pending == 0 and publisher.dropped == 0


def test_it_caps_each_node_stream_near_maxlen(redis_client, redis_url):
    publisher = RedisPublisher(redis_url, Keys(), maxlen=50)
    for tick in range(1000):
        publisher.publish([sample("gpu-001", float(tick)), sample("gpu-002", float(tick))])
    # MAXLEN ~ trims whole stream nodes (100 entries each), so a little more may remain.
    for node in ("gpu-001", "gpu-002"):
        assert 50 <= redis_client.xlen(Keys().telemetry_stream(node)) <= 250


def test_the_node_key_gets_only_the_newest_sample_of_a_batch(redis_client, redis_url):
    publisher = RedisPublisher(redis_url, Keys())
    publisher.publish([sample("gpu-01", 1.0), sample("gpu-01", 2.0)])
    assert parse(redis_client.get("gpulse:node:gpu-01"))["ts"] == 2.0
    assert [s["ts"] for s in stream(redis_client, "gpu-01")] == [1.0, 2.0]


@pytest.fixture
def own_redis():
    """A Redis this test may stop and start again on the same port."""
    server = EmbeddedRedis().start()
    yield server
    server.stop()


def test_it_buffers_through_an_outage_drops_the_oldest_and_flushes_in_order(own_redis, caplog):
    publisher = RedisPublisher(own_redis.url, Keys(), buffer_size=5, backoff_initial=0.05, backoff_max=0.05)
    publisher.publish([sample("gpu-01", 0.0)])
    with redis.Redis.from_url(own_redis.url) as client:
        assert len(stream(client, "gpu-01")) == 1

    own_redis.stop()
    with caplog.at_level(logging.INFO, logger="collectors.publisher"):
        for ts in range(1, 9):
            publisher.publish([sample("gpu-01", float(ts))])
            time.sleep(0.06)  # past the backoff, so every call really tries Redis
        assert publisher.pending == 5 and publisher.dropped == 3
        assert [r.levelname for r in caplog.records] == ["WARNING"], "one line per outage, not per sample"
        assert "unreachable" in caplog.records[0].getMessage()

        own_redis.start()
        time.sleep(0.06)
        publisher.publish([sample("gpu-01", 9.0)])

    # The restarted server kept nothing (no persistence): all it holds came from the
    # buffer, which the newest sample joined (pushing out one more old one) before the flush.
    with redis.Redis.from_url(own_redis.url) as client:
        assert [s["ts"] for s in stream(client, "gpu-01")] == [5.0, 6.0, 7.0, 8.0, 9.0]
        assert parse(client.get("gpulse:node:gpu-01"))["ts"] == 9.0
    assert publisher.pending == 0
    recovered = caplog.records[-1].getMessage()
    assert "reachable again" in recovered and "wrote 5 buffered samples, dropped 4" in recovered
    publisher.close()


def test_it_waits_out_the_backoff_instead_of_hammering_redis(own_redis):
    now = [0.0]
    publisher = RedisPublisher(own_redis.url, Keys(), backoff_initial=1.0, backoff_max=4.0, clock=lambda: now[0])
    own_redis.stop()
    publisher.publish([sample("gpu-01", 1.0)])
    own_redis.start()
    now[0] = 0.5
    publisher.publish([sample("gpu-01", 2.0)])
    assert publisher.pending == 2, "still inside the backoff: no attempt yet"
    now[0] = 1.1
    publisher.publish([sample("gpu-01", 3.0)])
    assert publisher.pending == 0
    publisher.close()


def test_publish_never_raises_when_redis_was_never_there():
    publisher = RedisPublisher(EmbeddedRedis().url, Keys(), buffer_size=2)
    for ts in range(4):
        publisher.publish([sample("gpu-01", float(ts))])
    assert publisher.pending == 2 and publisher.dropped == 2
    publisher.close()


def test_the_stdout_publisher_writes_one_json_line_per_sample():
    out = io.BytesIO()
    batch = [sample("gpu-01", 1.0), sample("gpu-02", 1.0)]
    StdoutPublisher(out).publish(batch)
    lines = out.getvalue().splitlines()
    assert [parse(line) for line in lines] == batch
