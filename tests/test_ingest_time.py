"""Time and identity: clock skew, duplicates, collector restarts, the hold after a Redis restart, pruning."""

import time

import orjson
import pytest
import redis as redis_lib

from dashboard.healthz.checks import check_ingest
from dashboard.live.ingest import Ingest
from dashboard.live.models import GpuRollup
from devtools.redis_server import EmbeddedRedis
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from tests.clock import Clock
from tests.ingest_stages import STAGES
from tests.samples import sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def frames():
    return []


def make_ingest(client, frames, **kwargs) -> Ingest:
    return Ingest(client, lambda frame: frames.append(orjson.loads(frame)) or True,
                  **{"discover_every": 0.0, "stages": STAGES, **kwargs})


def xadd(client, s: dict, **extra) -> None:
    client.xadd(Keys().telemetry_stream(s["node"]), {"s": schema.encode(s), **extra})


def stamped(node: str, seq: int, boot: str = "boot-a", **kwargs) -> dict:
    return {**sample(node, **kwargs), "seq": seq, "boot": boot}


@pytest.mark.parametrize("offset", [-3600.0, 3600.0])
def test_a_node_whose_clock_is_an_hour_off_is_flagged_never_down_and_loses_no_sample(
        redis_client, frames, settings, offset):
    settings.GPULSE_INGEST_MAX_LAG = 10.0
    ingest = make_ingest(redis_client, frames)
    for _ in range(5):
        xadd(redis_client, sample("skewed", ts=time.time() + offset))
        xadd(redis_client, sample("good"))
        ingest.read(block_ms=10)
        ingest.emit(time.time())
        time.sleep(1.0)
    assert ingest.processed == 10 and ingest.rejected == 0
    node = frames[-1]["nodes"]["skewed"]
    assert node["status"] == "up"
    assert abs(node["skew"] - offset) < 5
    assert abs(node["ts"] - time.time()) < 5, "placed at arrival time, not at its clock"
    assert "skew" not in frames[-1]["nodes"]["good"]
    assert all(f["nodes"]["skewed"]["status"] == "up" for f in frames if "skewed" in f["nodes"])
    beat = orjson.loads(redis_client.get(Keys().ingest_heartbeat))
    assert beat["lag_max"] < 2 and beat["nodes_clock_skew"] == 1
    ok, detail = check_ingest(beat)
    assert ok, detail
    # All five samples are in the rollups of the minute they arrived in, not of the node's clock.
    ingest.flush()
    rows = GpuRollup.objects.filter(node="skewed", gpu=0)
    assert sum(row.samples for row in rows) == 5
    assert all(abs(row.minute.timestamp() - time.time()) < 200 for row in rows)
    known = orjson.loads(redis_client.hget(Keys().known_nodes, "skewed"))
    assert abs(known["skew"] - offset) < 5


def test_a_node_skewed_by_less_than_the_setting_is_placed_at_its_own_ts(redis_client, frames):
    ingest = make_ingest(redis_client, frames, max_clock_skew=30.0)
    ts = time.time() - 20
    xadd(redis_client, sample("n1", ts=ts))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    assert frames[-1]["nodes"]["n1"]["ts"] == ts and "skew" not in frames[-1]["nodes"]["n1"]


@pytest.mark.parametrize("held", ["nan", "inf", "-5", "1e9", "soon", ""])
def test_a_held_field_that_is_not_seconds_rejects_its_entry_and_nothing_else(redis_client, frames, held):
    # A NaN here once placed a sample at NaN, and folding it into its minute raised on every tick.
    ingest = make_ingest(redis_client, frames)
    xadd(redis_client, sample("bad", ts=time.time() - 600), held=held)
    xadd(redis_client, sample("good"))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    assert ingest.rejected == 1 and set(ingest.state.nodes) == {"good"}
    ingest.flush()
    assert set(GpuRollup.objects.values_list("node", flat=True)) == {"good"}


def test_a_sample_its_collector_held_through_an_outage_is_placed_at_its_ts_and_not_flagged(redis_client, frames):
    ingest = make_ingest(redis_client, frames)
    old = time.time() - 600
    xadd(redis_client, sample("n1", ts=old), held="600.0")
    ingest.read(block_ms=10)
    node = ingest.state.nodes["n1"]
    assert node.ts == old and node.skew is None


def test_an_exact_duplicate_counts_once_in_rollups_and_state(redis_client, frames):
    ingest = make_ingest(redis_client, frames)
    minute = (time.time() // 60) * 60
    for seq in (0, 1, 1, 2, 0):  # a write retried after its reply was lost, twice
        xadd(redis_client, stamped("n1", seq, ts=minute + 1 + seq, util=10 * (seq + 1)))
    ingest.read(block_ms=10)
    assert ingest.processed == 3 and ingest.duplicates == 2
    assert ingest.state.nodes["n1"].sample["seq"] == 2
    ingest.flush()
    row = GpuRollup.objects.get(node="n1", gpu=0)
    assert row.samples == 3 and row.util_mean == 20


def test_a_collector_restart_is_seen_and_its_samples_are_not_duplicates(redis_client, frames, caplog):
    ingest = make_ingest(redis_client, frames)
    for seq in range(3):
        xadd(redis_client, stamped("n1", seq, boot="first"))
    for seq in range(2):  # the restarted collector counts from 0 again
        xadd(redis_client, stamped("n1", seq, boot="second", util=99))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    assert ingest.processed == 5 and ingest.duplicates == 0 and ingest.collector_restarts == 1
    assert ingest.state.nodes["n1"].sample["gpus"][0]["util"] == 99
    assert "its collector restarted" in caplog.text
    known = orjson.loads(redis_client.hget(Keys().known_nodes, "n1"))
    assert known["boot"] == "second" and known["restarts"] == 1


def test_the_node_api_shows_skew_and_restarts(redis_client, frames, admin_client):
    ingest = make_ingest(redis_client, frames)
    late = stamped("n1", 0, ts=time.time() - 3600)
    xadd(redis_client, late)
    redis_client.set(Keys().node("n1"), schema.encode(late), ex=3)
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    node = admin_client.get("/api/v1/nodes/n1").json()
    assert node["status"] == "up" and abs(node["clock_skew"] + 3600) < 5
    assert node["boot"] == "boot-a" and node["restarts"] == 0


def test_after_a_redis_restart_no_node_is_judged_down_before_its_collector_flushed(frames):
    server = EmbeddedRedis().start()
    try:
        client = redis_lib.Redis.from_url(server.url, socket_timeout=2)
        ingest = make_ingest(client, frames)
        names = [f"n{i}" for i in range(5)]
        for name in names:
            xadd(client, sample(name))
        ingest.step()
        ingest.emit(time.time())
        assert all(ingest.state.nodes[name].status == "up" for name in names)
        server.stop()
        stops = iter([False, False, True])
        ingest.run(lambda: next(stops))  # rides out the outage
        time.sleep(4)  # longer than the nodes' key lifetime: judged by age alone, all would be down
        server.start()
        changes = []

        def run_once():
            before = {name: node.status for name, node in ingest.state.nodes.items()}
            ingest.run(iter([False, True]).__next__)
            changes.extend((name, node.status) for name, node in ingest.state.nodes.items()
                           if node.status != before[name])

        deadline = time.time() + 4
        while time.time() < deadline:  # the collectors have not flushed yet: held, not down
            run_once()
        assert changes == [] and all(node.status == "up" for node in ingest.state.nodes.values())
        for name in names[:4]:  # four collectors flush their backlog; n4's collector is gone for good
            xadd(client, sample(name, ts=time.time() - 8), held="8.0")
            xadd(client, sample(name))
        deadline = time.time() + 10
        while ingest.state.nodes["n4"].status == "up" and time.time() < deadline:
            run_once()
            for name in names[:4]:
                xadd(client, sample(name))
        assert changes == [("n4", "down")], "only the node that did not come back is judged, once"
    finally:
        server.stop()


def test_a_node_down_longer_than_the_setting_is_forgotten(redis_client, frames):
    ingest = make_ingest(redis_client, frames, forget_nodes_after=60.0)
    xadd(redis_client, sample("gone"))
    xadd(redis_client, sample("alive"))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    keys = Keys()
    assert redis_client.hexists(keys.known_nodes, "gone") and redis_client.exists(keys.recent("gone"))
    later = time.time() + 120
    xadd(redis_client, sample("alive", ts=later))
    ingest.read(block_ms=10)
    ingest.state.nodes["alive"].arrived = later  # it kept reporting
    ingest.emit(later)
    assert ingest.state.nodes["gone"].status == "down"
    ingest.prune(later)
    ingest.emit(later)
    assert "gone" not in ingest.state.nodes and "alive" in ingest.state.nodes
    assert not redis_client.hexists(keys.known_nodes, "gone") and not redis_client.exists(keys.recent("gone"))
    assert frames[-1]["forgotten"] == ["gone"]
    assert "gone" not in orjson.loads(redis_client.get(keys.snapshot))["nodes"]


def test_a_short_forget_time_is_looked_at_every_quarter_of_it_not_once_a_minute(redis_client, frames):
    clock = Clock(time.time())
    ingest = make_ingest(redis_client, frames, forget_nodes_after=60.0, clock=clock)
    ingest.step()
    first = ingest.last_prune
    clock.now += 14.0
    ingest.step()
    assert ingest.last_prune == first
    clock.now += 1.0
    ingest.step()
    assert ingest.last_prune == first + 15.0
    assert make_ingest(redis_client, frames).prune_every == 60.0  # the default week: once a minute


def test_idle_consumers_with_nothing_pending_are_removed_from_the_group(redis_client, frames, monkeypatch):
    keys = Keys()
    stream = keys.telemetry_stream("n1")
    xadd(redis_client, sample("n1"))
    redis_client.xgroup_create(stream, INGEST_GROUP, id="0", mkstream=True)
    redis_client.xreadgroup(INGEST_GROUP, "dead-idle", {stream: ">"}, count=1)
    redis_client.xack(stream, INGEST_GROUP, redis_client.xrange(stream)[-1][0])
    ingest = make_ingest(redis_client, frames, consumer="me", forget_consumers_after=0.1)
    ingest.read(block_ms=10)  # on start, ingest takes over whatever was pending
    # A consumer that read an entry since, and died before acknowledging it.
    xadd(redis_client, sample("n1"))
    redis_client.xreadgroup(INGEST_GROUP, "dead-with-pending", {stream: ">"}, count=1)
    time.sleep(0.2)
    ingest.forget_idle_consumers()
    names = {c["name"] for c in redis_client.xinfo_consumers(stream, INGEST_GROUP)}
    names = {n.decode() if isinstance(n, bytes) else n for n in names}
    assert "dead-idle" not in names
    assert "dead-with-pending" in names, "a consumer that owns pending entries is kept for reclaim"
