"""Who may open a websocket: pages of this site only, and a bounded number per user.

A browser sends cookies with a websocket to any site that asks, so the Origin
must be the dashboard's own: scheme, host and port, compared with
GPULSE_EXTERNAL_URL when it is set, otherwise with the address the request
was made to (its Host, which ALLOWED_HOSTS must accept).

Each user's open sockets are counted across every web process in one Redis
sorted set (connection id -> heartbeat deadline): a socket keeps its place by
renewing its deadline, so the places of a process that died without closing
them lapse within HEARTBEAT_TTL seconds. While Redis is unreachable sockets
are admitted uncounted: the pages show the outage rather than failing to open.
"""

import asyncio
import logging
import time
import uuid
from urllib.parse import urlsplit

import redis
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from gpulse.keys import Keys

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30
HEARTBEAT_TTL = 3 * HEARTBEAT_SECONDS


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def _is_secure(scope) -> bool:
    """Like Django's request.is_secure(): the socket's scheme, or the TLS proxy's header."""
    if scope.get("scheme") in ("wss", "https"):
        return True
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, expected = settings.SECURE_PROXY_SSL_HEADER
        header = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode()
        return _header(scope, header) == expected
    return False


def allowed_origins(scope) -> list[str]:
    """The one origin a page of this site has, for this connection ([] if none is valid)."""
    if settings.GPULSE_EXTERNAL_URL:
        external = urlsplit(settings.GPULSE_EXTERNAL_URL)
        return [f"{external.scheme}://{external.netloc}".lower()]
    host = (_header(scope, b"host") or "").lower()
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return []
    return [f"{'https' if _is_secure(scope) else 'http'}://{host}"]


class SameOriginValidator:
    """ASGI middleware: refuse a websocket whose Origin is not this site's (scheme, host and port)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        # Channels' validator compares scheme, host and port when the pattern has a scheme.
        validator = OriginValidator(self.application, allowed_origins(scope))
        return await validator(scope, receive, send)


class SocketPlace:
    """One open socket's place among its user's, held in Redis while it lives."""

    def __init__(self, client, user_id: int):
        self.redis = client
        self.key = Keys().websockets(user_id)
        self.connection_id = uuid.uuid4().hex
        self.heartbeat: asyncio.Task | None = None

    async def claim(self) -> bool:
        """Take a place if the user has fewer than GPULSE_WS_MAX_PER_USER live sockets."""
        now = time.time()
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(self.key, "-inf", now)
                pipe.zadd(self.key, {self.connection_id: now + HEARTBEAT_TTL})
                pipe.zcard(self.key)
                pipe.expire(self.key, HEARTBEAT_TTL)
                _, _, count, _ = await pipe.execute()
        except redis.RedisError as exc:
            log.warning("websocket admitted uncounted, Redis unreachable: %s", exc)
            return True
        # Added first, counted second: two racing sockets may both be refused, never both admitted past the cap.
        if count > settings.GPULSE_WS_MAX_PER_USER:
            await self.redis.zrem(self.key, self.connection_id)
            return False
        self.heartbeat = asyncio.create_task(self._beat())
        return True

    async def _beat(self):
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.zadd(self.key, {self.connection_id: time.time() + HEARTBEAT_TTL})
                    pipe.expire(self.key, HEARTBEAT_TTL)
                    await pipe.execute()
            except redis.RedisError:  # the place may lapse meanwhile; the next beat takes it again
                continue

    async def release(self):
        if self.heartbeat is None:
            return
        self.heartbeat.cancel()
        self.heartbeat = None
        try:
            await self.redis.zrem(self.key, self.connection_id)
        except redis.RedisError as exc:  # the place lapses by itself
            log.warning("websocket place not released, Redis unreachable: %s", exc)
