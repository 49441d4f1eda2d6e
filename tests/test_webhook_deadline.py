"""Every outbound attempt ends within GPULSE_WEBHOOK_TIMEOUT in all, however the receiver behaves.

A socket timeout alone bounds each read, not the attempt: a receiver that
sends one byte a second would hold a worker (or the "Send test" button) for
ever. These receivers are real TCP servers on 127.0.0.1 that misbehave on purpose.
"""

import socketserver
import threading
import time

import pytest

from dashboard.alerts import outbound
from dashboard.alerts.outbound import TransportError

DEADLINE = 2.0  # seconds; more than the trickle's one byte a second
SLACK = 1.0  # scheduling on a loaded test machine
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


def timed(call, limit: float):
    """Run ``call`` in a thread; return (its result or exception, seconds taken), failing past ``limit``."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except Exception as exc:  # the caller asserts on it
            outcome["value"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the attempt was still running after {limit:g} s"
    return outcome["value"], time.monotonic() - started


@pytest.fixture
def deadline(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    settings.GPULSE_WEBHOOK_TIMEOUT = DEADLINE


@pytest.mark.parametrize("behaviour", ["trickle", "silent"])
def test_a_receiver_that_does_not_finish_answering_times_out_within_the_deadline(deadline, misbehaving, behaviour):
    receiver = misbehaving(behaviour)
    failed, took = timed(lambda: outbound.post(receiver.url, b"{}", {}), DEADLINE + SLACK)
    assert isinstance(failed, TransportError), failed
    assert not failed.permanent and failed.message == "timed out after 2 s (127.0.0.1)"
    assert took >= DEADLINE - 0.1


def test_a_gigabyte_body_is_cut_at_the_excerpt(deadline, misbehaving):
    receiver = misbehaving("gigabyte")
    response, took = timed(lambda: outbound.post(receiver.url, b"{}", {}), DEADLINE + SLACK)
    assert response.status == 200 and response.excerpt == "x" * outbound.EXCERPT_BYTES
    assert took < DEADLINE


def test_a_response_larger_than_the_cap_is_refused_before_it_ends(deadline, misbehaving):
    receiver = misbehaving("endless-headers")
    failed, took = timed(lambda: outbound.post(receiver.url, b"{}", {}), DEADLINE + SLACK)
    assert isinstance(failed, TransportError), failed
    assert failed.message == "the response from 127.0.0.1 is larger than 64 KiB"
    assert took < DEADLINE
