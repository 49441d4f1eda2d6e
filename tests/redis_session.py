"""pytest plugin (loaded with -p before Django reads its settings): one real
redis-server for the whole test session, on a free port, whose URL becomes
REDIS_URL for the settings, the channel layer and Celery alike."""

import os

from devtools.redis_server import EmbeddedRedis

server = EmbeddedRedis().start()
os.environ["REDIS_URL"] = server.url


def pytest_unconfigure(config):
    server.stop()
