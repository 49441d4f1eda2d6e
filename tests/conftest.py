"""Real parts for the suite: one private redis-server per test session."""

import os

import pytest
import redis

from gpulse.redis_server import EmbeddedRedis

# Settings read REDIS_URL at import; start the server before Django loads them.
_server = EmbeddedRedis().start()
os.environ["REDIS_URL"] = _server.url
os.environ.setdefault("GPULSE_REDIS_PREFIX", "gpulse:")


def pytest_unconfigure(config):
    _server.stop()


@pytest.fixture(scope="session")
def redis_server() -> EmbeddedRedis:
    return _server


@pytest.fixture
def redis_url(redis_server) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_server):
    """A client on an emptied database, so tests do not see each other's keys."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.close()
