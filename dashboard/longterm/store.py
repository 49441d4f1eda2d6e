"""How gpulse talks to a Prometheus-compatible store: its URL checked, its credentials from the environment,
one HTTP exchange at a time, redirects never followed.

The URL is operator configuration, so a private address is allowed (the store usually sits next to gpulse),
but only http and https, and no credentials in it: those come from GPULSE_REMOTE_STORE_* settings, so the URL
can be logged and shown.
"""

import base64
import http.client
import urllib.parse
from dataclasses import dataclass

from django.conf import settings

USER_AGENT = "gpulse"


class StoreURLError(ValueError):
    """The configured URL cannot be used; the message says why and what to set."""


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    host: str
    port: int | None
    path: str  # without a trailing slash for a base URL; as given for an endpoint

    @property
    def shown(self) -> str:
        port = f":{self.port}" if self.port else ""
        return f"{self.scheme}://{self.host}{port}{self.path}"


def parse_store_url(url: str, setting: str) -> StoreURL:
    """Check ``url`` (from ``setting``); raise StoreURLError naming the setting."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise StoreURLError(f"{setting} is not a URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https"):
        raise StoreURLError(f"{setting} must be an http or https URL, not {url!r}")
    if not parts.hostname:
        raise StoreURLError(f"{setting} names no host: {url!r}")
    if parts.username is not None or parts.password is not None:
        raise StoreURLError(f"{setting} must not carry credentials: set GPULSE_REMOTE_STORE_USERNAME and "
                            "GPULSE_REMOTE_STORE_PASSWORD (or GPULSE_REMOTE_STORE_BEARER_TOKEN) instead")
    if parts.query or parts.fragment:
        raise StoreURLError(f"{setting} must have no query or fragment: {url!r}")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return StoreURL(parts.scheme, host, port, parts.path.rstrip("/") or "")


def auth_headers() -> dict[str, str]:
    """The headers every request to the store carries: a bearer token or basic auth, and Mimir's tenant."""
    headers = {"User-Agent": USER_AGENT}
    if settings.GPULSE_REMOTE_STORE_BEARER_TOKEN:
        headers["Authorization"] = f"Bearer {settings.GPULSE_REMOTE_STORE_BEARER_TOKEN}"
    elif settings.GPULSE_REMOTE_STORE_USERNAME:
        pair = f"{settings.GPULSE_REMOTE_STORE_USERNAME}:{settings.GPULSE_REMOTE_STORE_PASSWORD}".encode()
        headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    if settings.GPULSE_REMOTE_STORE_TENANT:
        headers["X-Scope-OrgID"] = settings.GPULSE_REMOTE_STORE_TENANT
    return headers


def connect(url: StoreURL, timeout: float) -> http.client.HTTPConnection:
    """A connection to the store (not yet opened). http.client follows no redirect: a 3xx is an answer."""
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return kind(url.host.strip("[]"), url.port, timeout=timeout)


def read_limited(response: http.client.HTTPResponse, limit: int) -> bytes:
    """The response's body, refused past ``limit`` bytes: the store's answer is bounded like any input."""
    body = response.read(limit + 1)
    if len(body) > limit:
        raise ValueError(f"the store's answer is larger than {limit} bytes")
    return body
