"""The one outbound-HTTP module: address policy, redirects, timeouts, against a real local server.

Refused targets must be refused before any connection: this workplace forbids
traffic to non-loopback addresses, so every test here only ever connects to 127.0.0.1.
"""

import ipaddress
import time

import pytest

from dashboard.alerts import outbound
from dashboard.alerts.outbound import AddressPolicy, TransportError

HINT = (
    "(set GPULSE_WEBHOOK_ALLOW_PRIVATE=true to allow private targets, "
    "or list its network in GPULSE_WEBHOOK_ALLOWED_NETWORKS)"
)


@pytest.fixture
def connections(monkeypatch):
    """Record every address the module connects to."""
    made = []
    real = outbound._connect

    def record(address, port, timeout):
        made.append(address)
        return real(address, port, timeout)

    monkeypatch.setattr(outbound, "_connect", record)
    return made


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://127.0.0.1/hook", f"refused: 127.0.0.1 is a loopback address {HINT}"),
        ("http://10.0.0.1/hook", f"refused: 10.0.0.1 is a private address {HINT}"),
        ("http://169.254.169.254/latest/meta-data/", f"refused: 169.254.169.254 is a link-local address {HINT}"),
        ("http://[::1]:8080/hook", f"refused: ::1 is a loopback address {HINT}"),
        ("https://100.64.1.2/hook", f"refused: 100.64.1.2 is a CGNAT (shared, 100.64.0.0/10) address {HINT}"),
        ("http://0.0.0.0/", f"refused: 0.0.0.0 is an unspecified address {HINT}"),
        ("http://224.0.0.1/", f"refused: 224.0.0.1 is a multicast address {HINT}"),
        ("http://[::ffff:10.0.0.1]/", f"refused: ::ffff:10.0.0.1 is a private address {HINT}"),
        ("http://[fd00::1]/", f"refused: fd00::1 is a private address {HINT}"),
        ("http://localhost:9/hook", f"refused: localhost resolves to 127.0.0.1, which is a loopback address {HINT}"),
    ],
)
def test_it_refuses_non_global_targets_before_connecting(settings, connections, url, message):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(TransportError) as refused:
        outbound.post(url, b"{}", {})
    assert refused.value.permanent
    # localhost may resolve to ::1 first on some hosts; either way it is loopback.
    assert refused.value.message == message or ("localhost" in url and "loopback address" in refused.value.message)
    assert connections == []


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "gopher://example.com/", "http:///nohost"])
def test_it_refuses_other_schemes_and_hostless_urls(connections, url):
    with pytest.raises(TransportError) as refused:
        outbound.post(url, b"{}", {})
    assert refused.value.permanent and refused.value.message.startswith("refused:")
    assert connections == []


def test_allow_private_lets_a_loopback_receiver_through(settings, receiver, connections):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    response = outbound.post(receiver.url + "/hook?x=1", b'{"a": 1}', {"Content-Type": "application/json"})
    assert response.status == 200 and response.excerpt == "ok"
    [request] = receiver.wait_for(1)
    assert (request["method"], request["path"], request["body"]) == ("POST", "/hook?x=1", b'{"a": 1}')
    assert request["headers"]["Host"] == receiver.url.removeprefix("http://")
    assert connections == ["127.0.0.1"]


def test_an_allowed_network_admits_exactly_that_network(settings, receiver):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    settings.GPULSE_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    assert outbound.post(receiver.url, b"{}", {}).status == 200
    with pytest.raises(TransportError, match="127.0.0.2 is a loopback address"):
        outbound.post("http://127.0.0.2:9/", b"{}", {})


@pytest.mark.parametrize(
    "location, message",
    [
        ("http://10.0.0.1/internal", "refused: 10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "refused: 169.254.169.254 is a link-local address"),
        ("http://[::1]:9/", "refused: ::1 is a loopback address"),
    ],
)
def test_a_redirect_to_a_private_address_is_refused(receiver, connections, location, message):
    policy = AddressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),))
    receiver.answer(302, headers={"Location": location})
    with pytest.raises(TransportError) as refused:
        outbound.post(receiver.url, b"{}", {}, policy=policy)
    assert refused.value.permanent and refused.value.message.startswith(message)
    assert connections == ["127.0.0.1"]


def test_it_follows_up_to_three_redirects_and_307_repeats_the_post(settings, receiver):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    receiver.answer(307, 308, 307, headers={"Location": "/next"})
    response = outbound.post(receiver.url + "/first", b"payload", {"Content-Type": "text/plain"})
    assert response.status == 200 and response.url == receiver.url + "/next"
    requests = receiver.wait_for(4)
    assert [(r["method"], r["path"], r["body"]) for r in requests] == [("POST", "/first", b"payload")] + [
        ("POST", "/next", b"payload")
    ] * 3


def test_a_fourth_redirect_is_an_error(settings, receiver):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    receiver.answer(302, 302, 302, 302, headers={"Location": "/again"})
    with pytest.raises(TransportError, match="too many redirects"):
        outbound.post(receiver.url, b"{}", {})
    assert len(receiver.wait_for(4)) == 4


def test_a_slow_receiver_times_out_as_a_temporary_error(settings, receiver):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    receiver.answer(200, delay=3.0)
    started = time.monotonic()
    with pytest.raises(TransportError) as failed:
        outbound.post(receiver.url, b"{}", {}, timeout=0.3)
    assert not failed.value.permanent and "timed out after 0.3 s" in failed.value.message
    assert time.monotonic() - started < 2  # not the 3 s the receiver takes


def test_a_closed_port_is_a_temporary_connection_error(settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(TransportError) as failed:
        outbound.post("http://127.0.0.1:1/", b"{}", {})
    assert "connection to 127.0.0.1:1 failed" in failed.value.message and not failed.value.permanent


def test_a_host_name_is_connected_at_its_checked_address_with_its_name_as_host(receiver, connections):
    port = receiver.server.server_address[1]
    loopback = (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128"))
    policy = AddressPolicy(allowed_networks=loopback)
    response = outbound.post(f"http://localhost:{port}/named", b"{}", {}, policy=policy)
    assert response.status == 200
    [request] = receiver.wait_for(1)
    assert request["headers"]["Host"] == f"localhost:{port}"
    # Only checked addresses are dialled, never the name again (no second DNS answer).
    assert connections[-1] == "127.0.0.1" and set(connections) <= {"127.0.0.1", "::1"}
