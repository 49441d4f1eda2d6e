"""Real parts for the suite: the session's redis-server (tests/redis_session.py)."""

import pytest
import redis

from devtools.redis_server import EmbeddedRedis
from tests import redis_session

# Fixtures shared by several test modules: headless Chromium and the whole
# running system (browser tests), Celery workers, webhook receivers, live
# benchmark nodes, a Slurm cluster.
pytest_plugins = (
    "tests.browser",
    "tests.fixtures_system",
    "tests.celery_workers",
    "tests.webhook_receivers",
    "tests.benchmark_nodes",
    "tests.slurm_cluster",
)


# Fixtures through which a test reaches the suite's database: pytest-django's
# (every db fixture needs django_db_setup), the control-host workers (they get
# its DATABASE_URL) and the rollup database of test_ingest_durability.
DATABASE_FIXTURES = frozenset({"django_db_setup", "control_worker", "control_process", "scheduler_worker", "database",
                               "postgres_database"})


def pytest_collection_modifyitems(items):
    """Mark the tests that reach the database: CI runs only those again on PostgreSQL,
    as the others do the same on either."""
    for item in items:
        if item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.database)


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


# The suite's users, one per role, so every permission test has the same three.
@pytest.fixture
def user_password() -> str:
    return "pw-test-user-123"


@pytest.fixture
def admin_user(db, user_password):
    """A superuser (staff): may do everything. Replaces pytest-django's, so its admin_client logs in as this one."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("admin", password=user_password)


@pytest.fixture
def operator_user(db, user_password):
    """May launch benchmarks and edit alert rules, and nothing else (not staff)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("operator", password=user_password)
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["launch_benchmark", "add_rule", "change_rule", "delete_rule"]))
    return user


@pytest.fixture
def viewer_user(db, user_password):
    """Logged in, no permission: may look at everything, change nothing."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("viewer", password=user_password)


def _logged_in(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(admin_user):
    """A client logged in as admin_user."""
    return _logged_in(admin_user)


@pytest.fixture
def operator(operator_user):
    """A client logged in as operator_user."""
    return _logged_in(operator_user)


@pytest.fixture
def viewer(viewer_user):
    """A client logged in as viewer_user."""
    return _logged_in(viewer_user)
