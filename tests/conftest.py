"""Real parts for the suite: the session's redis-server (tests/redis_session.py)."""

import pytest
import redis

from gpulse.redis_server import EmbeddedRedis
from tests import redis_session


@pytest.fixture(scope="session")
def redis_server() -> EmbeddedRedis:
    return redis_session.server


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
