"""Real parts for the suite: the session's redis-server (tests/redis_session.py)."""

import pytest
import redis

from devtools.redis_server import EmbeddedRedis
from tests import redis_session

# Headless Chromium and the whole running system, for the browser tests.
pytest_plugins = ("tests.browser", "tests.fixtures_system")


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


@pytest.fixture(scope="session")
def django_db_modify_db_settings(tmp_path_factory):
    """Put the SQLite test database in a file: Celery worker threads then wait
    on its lock (WAL, busy timeout) instead of failing as in-memory SQLite does."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database["TEST"]["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")
