"""Real HTTP receivers on 127.0.0.1 for webhook tests, registered as fixtures in tests/conftest.py.

``receiver`` records requests and answers from a script; ``misbehaving``
makes TCP servers that misbehave on purpose (trickle, stay silent, send a
gigabyte or headers without end).
"""

import socketserver
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up first (the timeout test does so on purpose) is no error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Receiver:
    """A real HTTP server on 127.0.0.1 that records requests and answers from a script."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: deque = deque()  # (status, headers, delay) per request, then 200
        self.received = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, headers, delay = receiver.script.popleft() if receiver.script else (200, {}, 0)
                time.sleep(delay)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                with receiver.received:
                    receiver.requests.append(
                        {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    receiver.received.notify_all()

            do_POST = do_GET = _handle

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, *statuses, headers=None, delay=0.0):
        for status in statuses:
            self.script.append((status, headers or {}, delay))

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict]:
        """Block until ``count`` requests arrived (or fail); return them all."""
        with self.received:
            if not self.received.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"expected {count} requests, got {len(self.requests)}")
            return list(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


GIGABYTE = 1_000_000_000
CHUNK = 64 * 1024


def _trickle(handler, stop):
    """Answer one byte a second, a header that never ends."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
        if stop.wait(1.0):
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def _silent(handler, stop):
    """Accept the request and never answer."""
    stop.wait()


def _gigabyte_body(handler, stop):
    """Announce a 1 GB body and send it as fast as the client takes it."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % GIGABYTE)
    chunk = b"x" * CHUNK
    for _ in range(GIGABYTE // CHUNK):
        if stop.is_set():
            return
        handler.wfile.write(chunk)
        handler.sent += CHUNK


def _endless_headers(handler, stop):
    """Send header lines as fast as the client takes them, never the blank line."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    line = b"X-Junk: " + b"j" * 1000 + b"\r\n"
    while not stop.is_set():
        handler.wfile.write(line)
        handler.sent += len(line)


BEHAVIOURS = {"trickle": _trickle, "silent": _silent, "gigabyte": _gigabyte_body, "endless-headers": _endless_headers}


class MisbehavingReceiver:
    """A TCP server on 127.0.0.1 that reads the request, then answers as ``behaviour`` says."""

    def __init__(self, behaviour: str):
        self.stop = threading.Event()
        self.sent: list[int] = []
        answer, stop, sent = BEHAVIOURS[behaviour], self.stop, self.sent

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                self.sent = 0
                self.rfile.readline()
                try:
                    answer(self, stop)
                except OSError:
                    pass  # the client gave up, as it should
                finally:
                    sent.append(self.sent)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def misbehaving():
    """Return a factory of misbehaving receivers, all closed after the test."""
    made = []

    def make(behaviour: str) -> MisbehavingReceiver:
        made.append(MisbehavingReceiver(behaviour))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()
