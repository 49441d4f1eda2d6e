"""Where a node-side process (collector, node worker) finds its Redis URL: never on a command line.

A URL with a password in argv can be read by every user of the machine in
/proc/<pid>/cmdline. So the URL comes from the environment, ``REDIS_URL``, or
from a file named by ``GPULSE_REDIS_URL_FILE`` (or the collector's
``--redis-url-file``): a systemd ``LoadCredential=`` file under
``$CREDENTIALS_DIRECTORY``, a Kubernetes secret volume. The file wins over
``REDIS_URL`` where both are set. It is read once, at start: a rotated
credential takes a restart. Nothing here imports Django.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from gpulse.keys import DEFAULT_REDIS_URL

REDIS_URL_FILE_ENV = "GPULSE_REDIS_URL_FILE"
SCHEMES = ("redis", "rediss", "unix")
MAX_FILE_BYTES = 4096  # a URL, not a file named by mistake


class RedisUrlError(ValueError):
    """The credentials file is missing, unreadable, empty or holds no Redis URL; the message names
    the file and never its content."""


def read_redis_url_file(path: str | os.PathLike) -> str:
    """The Redis URL in the file at ``path``, surrounding whitespace (a final newline) stripped."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RedisUrlError(f"cannot read the Redis URL from {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise RedisUrlError(f"{path} holds more than {MAX_FILE_BYTES} bytes: not a Redis URL")
    try:
        url = raw.decode().strip()
    except UnicodeDecodeError:
        raise RedisUrlError(f"{path} is not UTF-8 text: not a Redis URL") from None
    if not url:
        raise RedisUrlError(f"{path} is empty: it should hold one Redis URL, e.g. redis://USER:PASSWORD@HOST:6379/0")
    if len(url.split()) != 1 or urlsplit(url).scheme not in SCHEMES:
        # The content is a secret: say what is wrong, never what is there.
        raise RedisUrlError(f"{path} does not hold one {'://, '.join(SCHEMES)}:// URL")
    return url


def redis_url_from_environment(environ: Mapping[str, str] | None = None, default: str = DEFAULT_REDIS_URL) -> str:
    """The file named by GPULSE_REDIS_URL_FILE, else REDIS_URL, else ``default``; RedisUrlError where the
    file is named but cannot give a URL (never a silent fall back to another Redis)."""
    environ = os.environ if environ is None else environ
    path = environ.get(REDIS_URL_FILE_ENV)
    if path:
        return read_redis_url_file(Path(path))
    return environ.get("REDIS_URL") or default


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (redis://user:PASSWORD@host, or ?password= on a unix socket)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.password) or "password=" in parts.query
