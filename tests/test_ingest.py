import time

import orjson
import pytest

from dashboard.live.frames import FIELDS, FLAG_LOST, MIB
from dashboard.live.ingest import Ingest
from dashboard.live.models import GpuRollup
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def frames():
    return []


@pytest.fixture
def make_ingest(redis_client, frames):
    def make(clock=None, **kwargs):
        def publish(frame: bytes) -> bool:
            frames.append(orjson.loads(frame))
            return True

        return Ingest(redis_client, publish, clock=clock or time.time, **kwargs)

    return make


def xadd(client, raw):
    client.xadd(Keys().telemetry, {"s": raw})


def test_it_sends_one_frame_per_tick_for_many_samples(redis_client, make_ingest, frames):
    ingest = make_ingest()
    for n in range(50):
        xadd(redis_client, schema.encode(sample(f"node-{n:02d}", gpus=8)))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    assert len(frames) == 1
    frame = frames[0]
    assert frame["type"] == "delta" and frame["fields"] == list(FIELDS)
    assert len(frame["nodes"]) == 50
    node = frame["nodes"]["node-07"]
    assert node["status"] == "up" and len(node["gpus"]) == 8
    util, mem, temp, power, clock, flags = node["gpus"][0]
    assert (util, temp, power, clock, flags) == (50, 60, 400, 1980, 0)
    assert mem == 40 * 1024  # MiB
    assert node["meta"][0] == ["H100 80GB HBM3", round(85520809984 / MIB), 700]


def test_a_malformed_entry_is_counted_and_skipped_without_losing_its_batch(redis_client, make_ingest, frames, caplog):
    ingest = make_ingest()
    xadd(redis_client, schema.encode(sample("good-1")))
    xadd(redis_client, b"{not json")
    xadd(redis_client, schema.encode({**sample("x"), "v": 7}))
    bad = sample("bad-field")
    del bad["gpus"]
    xadd(redis_client, schema.encode(bad))
    xadd(redis_client, schema.encode(sample("good-2")))
    assert ingest.read(block_ms=10) == 5
    ingest.emit(time.time())
    assert set(frames[0]["nodes"]) == {"good-1", "good-2"}
    assert ingest.malformed == 3
    assert "unknown sample version 7" in caplog.text
    assert "missing field 'gpus'" in caplog.text
    pending = redis_client.xpending(Keys().telemetry, INGEST_GROUP)
    assert pending["pending"] == 0  # bad entries are acknowledged, not retried forever


def test_a_node_goes_stale_then_down_as_its_data_ages(redis_client, make_ingest, frames):
    clock = Clock(1_000_000.0)
    ingest = make_ingest(clock=clock)
    xadd(redis_client, schema.encode(sample("n1", ts=clock.now, interval=1.0)))
    ingest.read(block_ms=10)
    ingest.emit(clock.now)
    assert frames[-1]["nodes"]["n1"]["status"] == "up"
    clock.now += 2.5
    ingest.emit(clock.now)
    assert frames[-1]["nodes"]["n1"]["status"] == "stale"
    clock.now += 1.0
    ingest.emit(clock.now)
    down = frames[-1]["nodes"]["n1"]
    assert down["status"] == "down"
    assert all(value is None for row in down["gpus"] for value in row), "a down node must not show old values"


def test_a_lost_gpu_is_flagged_and_the_others_report(redis_client, make_ingest, frames):
    ingest = make_ingest()
    s = sample("n1", gpus=3)
    s["gpus"][1] = {"index": 1, "uuid": "GPU-1", "lost": True, **{m: None for m in schema.GPU_METRIC_NAMES}}
    xadd(redis_client, schema.encode(s))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    rows = frames[0]["nodes"]["n1"]["gpus"]
    assert rows[1] == [None, None, None, None, None, FLAG_LOST]
    assert rows[0][0] == 50 and rows[2][0] == 50


def test_a_late_buffered_sample_does_not_replace_a_newer_one(redis_client, make_ingest):
    ingest = make_ingest()
    now = time.time()
    xadd(redis_client, schema.encode(sample("n1", ts=now, util=90)))
    xadd(redis_client, schema.encode(sample("n1", ts=now - 30, util=10)))
    ingest.read(block_ms=10)
    assert ingest.state.nodes["n1"].sample["gpus"][0]["util"] == 90


def test_entries_left_pending_by_a_dead_consumer_are_reclaimed(redis_client, make_ingest, frames, monkeypatch):
    dead = make_ingest(consumer="dead")
    xadd(redis_client, schema.encode(sample("orphan")))
    dead.ensure_group()
    # The dead consumer read the entry and died before acknowledging it.
    redis_client.xreadgroup(INGEST_GROUP, "dead", {Keys().telemetry: ">"}, count=10)
    monkeypatch.setattr("dashboard.live.ingest.RECLAIM_IDLE_MS", 0)
    survivor = make_ingest(consumer="survivor")
    survivor.ensure_group()
    assert survivor.reclaim() == 1
    survivor.emit(time.time())
    assert "orphan" in frames[-1]["nodes"]
    assert redis_client.xpending(Keys().telemetry, INGEST_GROUP)["pending"] == 0


def test_it_writes_the_snapshot_recent_points_known_nodes_and_heartbeat(redis_client, make_ingest):
    ingest = make_ingest()
    xadd(redis_client, schema.encode(sample("n1")))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    keys = Keys()
    snapshot = orjson.loads(redis_client.get(keys.snapshot))
    assert snapshot["type"] == "snapshot" and "meta" in snapshot["nodes"]["n1"]
    assert redis_client.llen(keys.recent("n1")) == 1
    assert redis_client.hexists(keys.known_nodes, "n1")
    beat = orjson.loads(redis_client.get(keys.ingest_heartbeat))
    assert beat["processed"] == 1 and beat["lag_max"] < 5


def test_a_restarted_ingest_remembers_nodes_whose_key_expired(redis_client, make_ingest, frames):
    first = make_ingest()
    xadd(redis_client, schema.encode(sample("gone", ts=time.time() - 100)))
    first.read(block_ms=10)
    first.emit(time.time())
    redis_client.delete(Keys().node("gone"))
    second = make_ingest()
    second.load_known_nodes()
    assert second.state.nodes["gone"].status == "down"


def test_minute_rollups_are_written_in_bulk_with_min_mean_max(redis_client, make_ingest):
    ingest = make_ingest()
    minute = 1_700_000_040.0  # a minute boundary
    for second, util in ((0, 10), (20, 30), (40, 50)):
        ingest.apply(sample("n1", gpus=2, ts=minute + second, util=util))
    assert GpuRollup.objects.count() == 0
    ingest.rollups.flush(now=minute + 200)
    rows = GpuRollup.objects.filter(node="n1").order_by("gpu")
    assert rows.count() == 2
    assert (rows[0].util_min, rows[0].util_mean, rows[0].util_max, rows[0].samples) == (10, 30, 50, 3)
    assert rows[0].minute.timestamp() == minute


def test_it_recovers_when_redis_restarts_empty(make_ingest, frames):
    import redis as redis_lib

    from gpulse.redis_server import EmbeddedRedis

    server = EmbeddedRedis().start()
    try:
        client = redis_lib.Redis.from_url(server.url, socket_timeout=2)
        ingest = Ingest(client, lambda frame: frames.append(orjson.loads(frame)) or True)
        xadd(client, schema.encode(sample("n1")))
        ingest.step()
        server.stop()
        stops = iter([False, False, True])
        ingest.run(lambda: next(stops))  # rides out the outage without raising
        server.start()
        xadd(client, schema.encode(sample("n2")))
        deadline = time.time() + 5
        while "n2" not in ingest.state.nodes and time.time() < deadline:
            ingest.run(iter([False, True]).__next__)
        assert "n2" in ingest.state.nodes
    finally:
        server.stop()


def probe(node, busbw, status="succeeded"):
    return {"v": 1, "node": node, "ts": time.time(), "backend": "gloo", "world_size": 2, "busbw": busbw,
            "status": status, "reason": None if status == "succeeded" else "rank 1 exited with code -9"}


def test_a_node_whose_probe_falls_below_its_own_median_is_flagged(redis_client, make_ingest, frames):
    from collectors.probe import publish_probe

    ingest = make_ingest()
    xadd(redis_client, schema.encode(sample("n1")))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    for busbw in (10.0, 10.4, 9.8, 10.1):
        publish_probe(redis_client, Keys(), probe("n1", busbw))
    ingest.emit(time.time())
    assert frames[-1]["nodes"]["n1"]["probe"] == {**frames[-1]["nodes"]["n1"]["probe"], "busbw": 10.1, "low": False}
    publish_probe(redis_client, Keys(), probe("n1", 7.0))  # 30 % under a median of 10
    ingest.emit(time.time())
    flagged = frames[-1]["nodes"]["n1"]["probe"]
    assert flagged["low"] and flagged["median"] == pytest.approx(10.05)
    publish_probe(redis_client, Keys(), probe("n1", None, status="failed"))
    ingest.emit(time.time())
    assert frames[-1]["nodes"]["n1"]["probe"]["low"] and frames[-1]["nodes"]["n1"]["probe"]["status"] == "failed"
    # A restarted ingest judges from the probe history at once.
    restarted = make_ingest()
    restarted.load_known_nodes()
    assert restarted.probes.latest["n1"]["status"] == "failed"
