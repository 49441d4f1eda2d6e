"""All outbound HTTP of gpulse goes through here (webhook deliveries and test sends).

A target is resolved, EVERY address it resolves to is checked, and the
connection goes to that checked address: a DNS answer that changes between
check and connect, or a redirect, cannot reach a private network unless the
operator allowed it (GPULSE_WEBHOOK_ALLOW_PRIVATE, GPULSE_WEBHOOK_ALLOWED_NETWORKS).
"""

import http.client
import io
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from django.conf import settings

MAX_REDIRECTS = 3
REDIRECT_CODES = (301, 302, 303, 307, 308)
EXCERPT_BYTES = 2048
# All we ever read of an answer: status line, headers and the excerpt; a bigger one is the receiver's fault.
MAX_RESPONSE_BYTES = 64 * 1024
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_ALLOW_HINT = (
    "set GPULSE_WEBHOOK_ALLOW_PRIVATE=true to allow private targets, "
    "or list its network in GPULSE_WEBHOOK_ALLOWED_NETWORKS"
)


class TransportError(Exception):
    """A request that did not produce an HTTP response; ``permanent`` means retrying cannot help."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


@dataclass(frozen=True)
class Response:
    status: int
    excerpt: str  # the first bytes of the body, for the delivery log
    url: str  # the URL that answered, after redirects


@dataclass(frozen=True)
class AddressPolicy:
    allow_private: bool = False
    allowed_networks: tuple = ()

    @classmethod
    def from_settings(cls) -> "AddressPolicy":
        try:
            networks = tuple(ipaddress.ip_network(n, strict=False) for n in settings.GPULSE_WEBHOOK_ALLOWED_NETWORKS)
        except ValueError as exc:
            raise TransportError(f"GPULSE_WEBHOOK_ALLOWED_NETWORKS is invalid: {exc}", permanent=True) from None
        return cls(allow_private=settings.GPULSE_WEBHOOK_ALLOW_PRIVATE, allowed_networks=networks)

    def refusal(self, address: str) -> str | None:
        """Return why ``address`` must not be contacted, or None when it may."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if self.allow_private or any(ip in net for net in self.allowed_networks if net.version == ip.version):
            return None
        kind = _non_global_kind(ip)
        if kind is None:
            return None
        return f"refused: {address} is {kind} ({_ALLOW_HINT})"


def _non_global_kind(ip) -> str | None:
    """Return what kind of non-public address ``ip`` is, or None for a global unicast one."""
    if ip.version == 6:
        # An IPv6 address can carry an IPv4 one (mapped, 6to4, Teredo, NAT64):
        # judge the IPv4 address it would reach.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return _non_global_kind(embedded)
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.version == 4 and ip in _CGNAT:
        return "a CGNAT (shared, 100.64.0.0/10) address"
    if ip.is_private:
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "not a globally routable address"
    return None


def _target(url: str):
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TransportError(f"refused: {url!r} is not an http or https URL", permanent=True)
    if not parts.hostname:
        raise TransportError(f"refused: {url!r} has no host", permanent=True)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TransportError(f"refused: {url!r} has an invalid port", permanent=True) from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port, path


def _checked_addresses(host: str, port: int, policy: AddressPolicy) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TransportError(f"cannot resolve {host}: {exc}") from None
    # The stubs type a sockaddr's host as str | int; for AF_INET and AF_INET6 it is the address string.
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        reason = policy.refusal(address)
        if reason:
            if address != host:
                reason = reason.replace(f"{address} is", f"{host} resolves to {address}, which is", 1)
            raise TransportError(reason, permanent=True)
    return addresses


def check_target(url: str, policy: AddressPolicy | None = None) -> None:
    """Resolve ``url``'s host and check it as a delivery would; raise TransportError if refused.

    ``permanent`` is set when the policy refuses an address (or the URL), not
    when the host merely did not resolve.
    """
    _scheme, host, port, _path = _target(url)
    _checked_addresses(host, port, policy or AddressPolicy.from_settings())


def _connect(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((address, port), timeout=timeout)


class _Deadline:
    """The moment an attempt must be over, whatever the receiver does.

    A socket timeout bounds one read: a receiver sending a byte a second would
    never trip it. Every operation instead gets what is left of the attempt.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


class _ResponseReader(io.RawIOBase):
    """The socket as HTTPResponse reads it: each read waits at most until the deadline,
    and all reads together stop at MAX_RESPONSE_BYTES."""

    def __init__(self, sock: socket.socket, deadline: _Deadline, host: str):
        super().__init__()
        # Reading through the socket's own file keeps it open after the connection
        # lets go of it, as it does at once for a response that ends the connection.
        self._sock, self._file = sock, sock.makefile("rb", buffering=0)
        self._deadline, self._host = deadline, host
        self._read = 0

    def makefile(self, mode: str):
        # HTTPResponse asks its socket for a file: hand it this reader, buffered.
        return io.BufferedReader(self)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._read >= MAX_RESPONSE_BYTES:
            raise TransportError(f"the response from {self._host} is larger than {MAX_RESPONSE_BYTES // 1024} KiB")
        self._sock.settimeout(self._deadline.remaining())
        count = self._file.readinto(memoryview(buffer)[: MAX_RESPONSE_BYTES - self._read])
        assert count is not None  # None is a non-blocking socket's "nothing yet"; this one times out instead
        self._read += count
        return count

    def close(self):
        self._file.close()
        super().close()


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an already-checked address, within a deadline; Host stays the URL's name."""

    def __init__(self, host, port, address, deadline: _Deadline):
        super().__init__(host, port)
        self._address, self._deadline = address, deadline

    def _open(self) -> socket.socket:
        return _connect(self._address, self.port, self._deadline.remaining())

    def connect(self):
        self.sock = self._open()

    def send(self, data):
        if self.sock is not None:
            # sendall's timeout bounds the whole call: give it what is left.
            self.sock.settimeout(self._deadline.remaining())
        super().send(data)

    # The stubs declare response_class a class; http.client only calls it, and
    # HTTPResponse only calls its socket's makefile(), which _ResponseReader has.
    def response_class(self, sock, *args, **kwargs):  # type: ignore[override]
        reader = _ResponseReader(sock, self._deadline, self.host)
        return http.client.HTTPResponse(reader, *args, **kwargs)  # type: ignore[arg-type]


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = http.client.HTTPS_PORT

    def connect(self):
        sock = self._open()
        sock.settimeout(self._deadline.remaining())  # the handshake's bound, in all
        # The certificate is checked against the URL's host name, not the IP.
        self.sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)


def _once(method, url, body, headers, policy, deadline: _Deadline):
    scheme, host, port, path = _target(url)
    addresses = _checked_addresses(host, port, policy)
    cls = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    last_error = None
    for address in addresses:
        conn = cls(host, port, address, deadline)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            excerpt = resp.read(EXCERPT_BYTES).decode("utf-8", "replace")
            return resp.status, resp.getheader("Location"), excerpt
        except TimeoutError:
            raise TransportError(f"timed out after {deadline.seconds:g} s ({host})") from None
        except ssl.SSLError as exc:
            raise TransportError(f"TLS error with {host}: {exc.reason or exc}") from None
        except (OSError, http.client.HTTPException) as exc:
            last_error = exc
        finally:
            conn.close()
    raise TransportError(f"connection to {host}:{port} failed: {last_error}")


def post(
    url: str, body: bytes, headers: dict, *, timeout: float | None = None, policy: AddressPolicy | None = None
) -> Response:
    """POST ``body`` to ``url`` and return the final response (any status).

    Follows at most three redirects, each re-checked (307/308 repeat the POST,
    301/302/303 become a GET as browsers do). The whole of it, redirects
    included, ends within ``timeout`` (default GPULSE_WEBHOOK_TIMEOUT) seconds.
    Raise TransportError when the target is refused or no response came back.
    """
    policy = policy or AddressPolicy.from_settings()
    deadline = _Deadline(timeout or settings.GPULSE_WEBHOOK_TIMEOUT)
    method = "POST"
    payload: bytes | None = body
    for _hop in range(MAX_REDIRECTS + 1):
        status, location, excerpt = _once(method, url, payload, headers, policy, deadline)
        if status not in REDIRECT_CODES or not location:
            return Response(status=status, excerpt=excerpt, url=url)
        url = urljoin(url, location)
        if status in (301, 302, 303):
            method, payload = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "content-length")}
    raise TransportError(f"too many redirects (more than {MAX_REDIRECTS})", permanent=True)
