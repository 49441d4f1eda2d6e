import asyncio
import time

import orjson
import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from dashboard.asgi import application
from dashboard.live.ingest import Ingest
from dashboard.live.publish import FramePublisher
from gpulse import schema
from gpulse.keys import Keys
from tests.ingest_stages import STAGES
from tests.samples import sample

pytestmark = pytest.mark.django_db(transaction=True)


def login_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def session_cookie(viewer_user):
    return login_cookie(viewer_user)


def headers(cookie=None, origin="http://localhost"):
    result = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if cookie:
        result.append((b"cookie", f"sessionid={cookie}".encode()))
    return result


async def test_an_unauthenticated_websocket_is_closed(redis_client):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers())
    connected, code = await communicator.connect()
    assert not connected and code == 4401
    await communicator.disconnect()


async def test_a_foreign_origin_is_refused(redis_client, session_cookie):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(session_cookie, "https://evil.example"))
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


@pytest.mark.parametrize("origin", [
    "http://localhost:9999",  # another port on the same host
    "https://localhost",  # another scheme
    "http://localhost.evil.example",
    "null",
])
async def test_an_origin_other_than_the_page_itself_is_refused(redis_client, session_cookie, origin):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(session_cookie, origin))
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_a_socket_without_an_origin_is_refused(redis_client, session_cookie):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(session_cookie)[1:])
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_the_page_on_a_non_default_port_is_its_own_origin(redis_client, session_cookie):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=[
        (b"origin", b"http://localhost:8001"), (b"host", b"localhost:8001"),
        (b"cookie", f"sessionid={session_cookie}".encode()),
    ])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.disconnect()


@pytest.mark.parametrize(("origin", "accepted"), [
    ("https://gpulse.example.com", True),
    ("https://gpulse.example.com:443", True),
    ("http://gpulse.example.com", False),
    ("https://gpulse.example.com:8443", False),
    ("http://localhost", False),  # the Host header is not the public address
])
async def test_with_an_external_url_only_its_origin_is_accepted(
    redis_client, session_cookie, settings, origin, accepted
):
    settings.GPULSE_EXTERNAL_URL = "https://gpulse.example.com/"
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(session_cookie, origin))
    connected, _ = await communicator.connect()
    assert connected is accepted
    await communicator.disconnect()


async def connect_cluster(cookie):
    communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(cookie))
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_one_user_holds_at_most_the_configured_number_of_sockets(
        redis_client, session_cookie, operator_user, settings):
    settings.GPULSE_WS_MAX_PER_USER = 3
    held = []
    for _ in range(3):
        communicator, connected, _ = await connect_cluster(session_cookie)
        assert connected
        held.append(communicator)
    extra, connected, code = await connect_cluster(session_cookie)
    assert not connected and code == 4429
    await extra.disconnect()

    other = await asyncio.to_thread(login_cookie, operator_user)
    communicator, connected, _ = await connect_cluster(other)
    assert connected  # the cap is per user
    await communicator.disconnect()

    await held.pop().disconnect()
    communicator, connected, _ = await connect_cluster(session_cookie)
    assert connected  # a closed socket gives its place back
    held.append(communicator)
    for communicator in held:
        await communicator.disconnect()


async def test_sockets_of_a_crashed_process_stop_counting_once_their_heartbeat_lapses(
        redis_client, session_cookie, viewer_user, settings):
    settings.GPULSE_WS_MAX_PER_USER = 1
    key = Keys().websockets(viewer_user.pk)
    redis_client.zadd(key, {"crashed-process-socket": time.time() - 1})  # its deadline has passed
    communicator, connected, _ = await connect_cluster(session_cookie)
    assert connected
    assert redis_client.zcard(key) == 1
    await communicator.disconnect()
    assert redis_client.zcard(key) == 0


async def test_a_browser_gets_the_snapshot_then_one_delta_per_tick(redis_client, session_cookie):
    publisher = FramePublisher()
    ingest = Ingest(redis_client, publisher.publish, discover_every=0.0, stages=STAGES)
    try:
        redis_client.xadd(Keys().telemetry_stream("n1"), {"s": schema.encode(sample("n1"))})
        await asyncio.to_thread(ingest.read, 10)
        await asyncio.to_thread(ingest.emit, ingest.clock())

        communicator = WebsocketCommunicator(application, "/ws/cluster/", headers=headers(session_cookie))
        connected, _ = await communicator.connect()
        assert connected
        snapshot = orjson.loads(await communicator.receive_from(timeout=5))
        assert snapshot["type"] == "snapshot" and set(snapshot["nodes"]) == {"n1"}

        for n in range(20):
            redis_client.xadd(Keys().telemetry_stream(f"m{n}"), {"s": schema.encode(sample(f"m{n}"))})
        await asyncio.to_thread(ingest.read, 10)
        await asyncio.to_thread(ingest.emit, ingest.clock())
        delta = orjson.loads(await communicator.receive_from(timeout=5))
        assert delta["type"] == "delta" and delta["seq"] > snapshot["seq"]
        assert len(delta["nodes"]) == 20
        assert await communicator.receive_nothing(timeout=0.3)  # 20 samples, one frame
        await communicator.disconnect()
    finally:
        publisher.close()


async def test_the_node_socket_sends_the_full_sample_and_status(redis_client, session_cookie):
    s = sample("n1", gpus=2)
    s["gpus"][0]["processes"] = [{"pid": 42, "name": "python", "user": "alice", "mem_used": 1 << 30}]
    redis_client.set(Keys().node("n1"), schema.encode(s))
    communicator = WebsocketCommunicator(application, "/ws/nodes/n1/", headers=headers(session_cookie))
    connected, _ = await communicator.connect()
    assert connected
    message = orjson.loads(await communicator.receive_from(timeout=5))
    assert message["status"] == "up"
    assert message["sample"]["gpus"][0]["processes"][0]["pid"] == 42
    redis_client.delete(Keys().node("n1"))
    message = orjson.loads(await communicator.receive_from(timeout=5))
    assert message["status"] == "down" and message["sample"] is None
    await communicator.disconnect()


@pytest.mark.parametrize("flagged", [b"not json", b"[1, 2]", b'{"n1": "0"}', b'{"n1": [0, "x", true, 1]}'])
async def test_a_malformed_sm_idle_key_flags_nothing_and_loses_nothing_else(redis_client, session_cookie, flagged):
    # The key is ingest's, but a wrong value in it (another version's, a hand edit) must not read as Redis
    # being away and hide the node's sample.
    redis_client.set(Keys().node("n1"), schema.encode(sample("n1", gpus=2)))
    redis_client.set(Keys().sm_idle, flagged)
    communicator = WebsocketCommunicator(application, "/ws/nodes/n1/", headers=headers(session_cookie))
    connected, _ = await communicator.connect()
    assert connected
    message = orjson.loads(await communicator.receive_from(timeout=5))
    await communicator.disconnect()
    redis_client.delete(Keys().node("n1"), Keys().sm_idle)
    assert "error" not in message and message["status"] == "up" and message["sample"]["node"] == "n1"
    assert message["sm_idle_gpus"] == ([0, 1] if flagged.startswith(b'{"n1": [') else [])


async def test_a_job_socket_outlasts_a_quiet_queue_then_relays_rows_and_the_end(redis_client, session_cookie):
    from gpulse import job_events

    communicator = WebsocketCommunicator(application, "/ws/benchmarks/7/", headers=headers(session_cookie))
    connected, _ = await communicator.connect()
    assert connected
    # Longer than the Redis client's 5 s socket timeout: the job is still queued.
    assert await communicator.receive_nothing(timeout=6)
    job_events.emit(redis_client, Keys(), 7, {"kind": "row", "row": {"size": 1024}})
    job_events.emit(redis_client, Keys(), 7, {"kind": "final", "status": "succeeded", "reason": ""})
    assert orjson.loads(await communicator.receive_from(timeout=5))["kind"] == "row"
    assert orjson.loads(await communicator.receive_from(timeout=5))["kind"] == "final"
    assert (await communicator.receive_output(timeout=5))["type"] == "websocket.close"
    await communicator.disconnect()


async def test_the_node_socket_judges_a_node_with_a_skewed_clock_by_arrival(redis_client, session_cookie):
    publisher = FramePublisher()
    ingest = Ingest(redis_client, publisher.publish, stages=STAGES)
    try:
        behind = sample("skewed", ts=time.time() - 3600)  # its clock is an hour behind; it reports every second
        redis_client.xadd(Keys().telemetry_stream("skewed"), {"s": schema.encode(behind)})
        redis_client.set(Keys().node("skewed"), schema.encode(behind))  # as its collector writes it
        await asyncio.to_thread(ingest.read, 10)
        await asyncio.to_thread(ingest.emit, ingest.clock())

        communicator = WebsocketCommunicator(application, "/ws/nodes/skewed/", headers=headers(session_cookie))
        connected, _ = await communicator.connect()
        assert connected
        message = orjson.loads(await communicator.receive_from(timeout=5))
        assert message["status"] == "up"
        assert message["sample"]["gpus"]
        assert message["clock_skew"] == pytest.approx(-3600, abs=5)
        assert message["ts"] == pytest.approx(time.time(), abs=5)  # placed at its arrival, not an hour ago
        await communicator.disconnect()
    finally:
        publisher.close()
