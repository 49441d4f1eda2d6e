"""The ASGI app under a real uvicorn on a free port, for tests that need a server of their own."""

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def uvicorn_server(state: Path, redis_url: str, seed: str, *uvicorn_args: str, **env: str) -> Iterator[str]:
    """Yield the base URL of uvicorn serving gpulse on a SQLite database in ``state``.

    ``seed`` (Python run with Django set up) prepares the database first;
    ``uvicorn_args`` and ``env`` (settings) add to the server's own.
    """
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GPULSE_")}
    environ.update(DJANGO_SETTINGS_MODULE="dashboard.settings", REDIS_URL=redis_url, PYTHONUNBUFFERED="1",
                   DATABASE_URL=f"sqlite:///{state / 'db.sqlite3'}", **env)
    subprocess.run([sys.executable, "-c", seed], cwd=ROOT, env=environ, check=True, timeout=120)
    port = free_port()
    log = open(state / "web.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "dashboard.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "off", "--no-access-log", *uvicorn_args],
        cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # 503: no ingest heartbeat, but the server answers
            except OSError:
                assert server.poll() is None, (state / "web.log").read_text()
                assert time.monotonic() < deadline, "uvicorn did not answer within 60 s"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(10)
        log.close()
