"""Every outbound attempt ends within GPULSE_WEBHOOK_TIMEOUT in all, however the receiver behaves.

A socket timeout alone bounds each read, not the attempt: a receiver that
sends one byte a second would hold a worker (or the "Send test" button) for
ever. The receivers (the ``misbehaving`` fixture, tests/webhook_receivers.py) are
real TCP servers on 127.0.0.1 that misbehave on purpose.
"""

import threading
import time

import pytest

from dashboard.alerts import outbound
from dashboard.alerts.outbound import TransportError

DEADLINE = 2.0  # seconds; more than the trickle's one byte a second
SLACK = 1.0  # scheduling on a loaded test machine


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
