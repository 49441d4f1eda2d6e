import datetime as dt
import itertools
import time

import orjson
import pytest

from collectors import health_checks
from dashboard.live import streams
from dashboard.live.frames import FIELDS, FLAG_ALLOCATED, FLAG_IDLE, FLAG_LOST, FLAG_THROTTLED, MIB, gpu_row
from dashboard.live.ingest import Ingest
from dashboard.live.models import GpuRollup
from dashboard.probes.stage import ProbeStage
from dashboard.rollups.stage import RollupStage
from gpulse import schema, usage
from gpulse.keys import INGEST_GROUP, Keys
from tests.clock import Clock
from tests.ingest_stages import STAGES, stage_of, with_alerts
from tests.samples import sample, stream_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def frames():
    return []


@pytest.fixture
def make_ingest(redis_client, frames):
    def make(clock=None, **kwargs):
        def publish(frame: bytes) -> bool:
            frames.append(orjson.loads(frame))
            return True

        # A node's stream is found as soon as it is read, not a second later.
        return Ingest(redis_client, publish, clock=clock or time.time,
                      **{"discover_every": 0.0, "stages": STAGES, **kwargs})

    return make


def xadd(client, raw, at=None, held=None, node=None):
    """Add an entry to its node's stream (``node``'s, for one naming none); ``at``: its arrival time (unix s, for a
    test's fake clock); ``held``: s its collector held it."""
    fields = {"s": raw} if held is None else {"s": raw, "held": str(held)}
    client.xadd(stream_of(raw, node), fields, id=entry_at(at) if at is not None else "*")


ENTRY_SEQ = itertools.count()


def entry_at(ts: float) -> bytes:
    """A stream entry id that arrived at ``ts`` (its millisecond part), for apply() and fake clocks."""
    return f"{int(ts * 1000)}-{next(ENTRY_SEQ)}".encode()


def apply(ingest, sample):
    """Apply ``sample`` as if it reached the stream at its own ts."""
    ingest.apply(sample, entry_at(sample["ts"]))


def test_a_backlog_on_every_stream_is_read_a_bounded_batch_at_a_time(redis_client, make_ingest, monkeypatch):
    # A read's reply is held whole in memory: a backlog on 1,000 streams at 100 entries each took ingest to 3.8 GB.
    monkeypatch.setattr(streams, "READ_BUDGET", 60)
    ingest = make_ingest()
    for n in range(20):
        for second in range(10):
            xadd(redis_client, schema.encode(sample(f"node-{n:02d}", ts=1000.0 + second)))
    reads = []
    while got := ingest.read(block_ms=None):
        reads.append(got)
    assert reads == [60, 60, 60, 20]  # 3 entries of each stream a read, then the last one of each


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
    util, mem, temp, power, clock, sm_active, flags = node["gpus"][0]
    assert (util, temp, power, clock, sm_active, flags) == (50, 60, 400, 1980, None, 0)  # no GPM: null, never 0
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
    assert ingest.rejected == 3
    assert "unknown sample version 7" in caplog.text
    assert "missing field 'gpus'" in caplog.text
    for stream in ingest.streams.values():  # bad entries are acknowledged, not retried forever
        assert redis_client.xpending(stream, INGEST_GROUP)["pending"] == 0


def test_a_node_goes_stale_then_down_as_its_data_ages(redis_client, make_ingest, frames):
    clock = Clock(time.time())  # ages count from arrival on the stream, on Redis' (this machine's) clock
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
    assert rows[1] == [None] * (len(FIELDS) - 1) + [FLAG_LOST]
    assert rows[0][0] == 50 and rows[2][0] == 50


def owned(util, **gpu_fields) -> dict:
    """A GPU reading of a process that dana's job 41007 runs."""
    process = {"pid": 4242, "name": "python", "user": "dana", "job": "41007", "mem_used": 1 << 30}
    return {"util": util, "processes": [process], **gpu_fields}


def test_allocated_gpus_are_flagged_and_idle_ones_below_the_busy_threshold_ingest_was_given(
        redis_client, make_ingest, frames):
    ingest = make_ingest(busy_util=20.0)
    s = sample("n1", gpus=5)
    s["gpus"][1].update(owned(19))  # below 20 %: idle
    s["gpus"][2].update(owned(20))  # at the threshold: busy
    s["gpus"][3].update(owned(None))  # no utilization: allocated, no verdict
    s["gpus"][4].update(util=0, k8s={"pod": "nb-1", "namespace": "ml", "container": None})  # a pod, no process seen
    xadd(redis_client, schema.encode(s))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    flags = [row[-1] for row in frames[0]["nodes"]["n1"]["gpus"]]
    assert flags == [0, FLAG_ALLOCATED | FLAG_IDLE, FLAG_ALLOCATED, FLAG_ALLOCATED, FLAG_ALLOCATED | FLAG_IDLE]


@pytest.mark.parametrize("reading", [
    {}, owned(0), owned(4.9), owned(5), owned(None), {"util": 0, "processes": None},
    {"util": 1, "k8s": {"pod": "p", "namespace": None, "container": None}},
    {"util": 1, "k8s": {"pod": None, "namespace": "ml", "container": None}},
    {**owned(0), "lost": True, "util": None},
])
def test_the_frame_flags_say_what_gpulse_usage_says(reading):
    # gpu_row inlines usage's tests for speed: they must not drift apart.
    gpu = {**sample("n1", gpus=1)["gpus"][0], "processes": [], **reading}
    flags = gpu_row(gpu)[-1]
    assert bool(flags & FLAG_ALLOCATED) == (usage.is_allocated(gpu) and not gpu.get("lost"))
    assert bool(flags & FLAG_IDLE) == (usage.is_idle_allocated(gpu) is True)


@pytest.mark.parametrize("throttle, slowdown", [
    (["sw_power_cap"], False),  # where a busy GPU runs: a real H100 under load sits at its 700 W cap
    (["gpu_idle"], False),
    (["hw_thermal_slowdown"], True),
    (["sw_power_cap", "hw_power_brake_slowdown"], True),
    (["sw_thermal_slowdown"], True),
])
def test_the_thr_flag_is_what_the_clocks_health_check_warns_about(throttle, slowdown):
    gpu = {**sample("n1", gpus=1, util=100)["gpus"][0], "throttle": throttle}
    assert bool(gpu_row(gpu)[-1] & FLAG_THROTTLED) == slowdown
    assert (health_checks.clocks(gpu, health_checks.GpuMemory(), 0.0) is not None) == slowdown


def test_a_late_buffered_sample_does_not_replace_a_newer_one(redis_client, make_ingest):
    ingest = make_ingest()
    now = time.time()
    xadd(redis_client, schema.encode(sample("n1", ts=now, util=90)))
    xadd(redis_client, schema.encode(sample("n1", ts=now - 30, util=10)), held=30)  # buffered through an outage
    ingest.read(block_ms=10)
    assert ingest.state.nodes["n1"].sample["gpus"][0]["util"] == 90


def test_entries_left_pending_by_a_dead_consumer_are_reclaimed(redis_client, make_ingest, frames, monkeypatch):
    dead = make_ingest(consumer="dead")
    xadd(redis_client, schema.encode(sample("orphan")))
    dead.ensure_group()
    # The dead consumer read the entry and died before acknowledging it.
    redis_client.xreadgroup(INGEST_GROUP, "dead", {Keys().telemetry_stream("orphan"): ">"}, count=10)
    survivor = make_ingest(consumer="survivor")
    assert survivor.read(block_ms=10) == 0  # taken over when it starts, before anything new
    survivor.emit(time.time())
    assert "orphan" in frames[-1]["nodes"]
    assert redis_client.xpending(Keys().telemetry_stream("orphan"), INGEST_GROUP)["pending"] == 0, \
        "acknowledged once written"


def test_entries_a_live_consumer_left_pending_for_long_are_reclaimed(redis_client, make_ingest, frames, monkeypatch,
                                                                    settings):
    settings.GPULSE_ROLLUP_FLUSH_INTERVAL, settings.GPULSE_USAGE_FLUSH_INTERVAL = 0.0, 0.0
    survivor = make_ingest(consumer="survivor")
    xadd(redis_client, schema.encode(sample("orphan")))
    survivor.ensure_group()
    redis_client.xreadgroup(INGEST_GROUP, "dead", {Keys().telemetry_stream("orphan"): ">"}, count=10)
    monkeypatch.setattr("dashboard.live.streams.RECLAIM_IDLE_MS", 0)
    assert survivor.reclaim() == 1
    survivor.emit(time.time())
    assert "orphan" in frames[-1]["nodes"]


def test_entries_held_until_the_next_rollup_write_are_not_reclaimed_by_their_own_ingest(redis_client, make_ingest):
    ingest = make_ingest()
    xadd(redis_client, schema.encode(sample("n1")))
    ingest.read(block_ms=10)  # held, unacknowledged, until the next write (the database may be away)
    assert ingest.reclaim(min_idle_ms=0) == 0
    assert ingest.processed == 1 and len(ingest.unacked) == 1
    ingest.flush()
    assert GpuRollup.objects.get(node="n1", gpu=0).samples == 1
    assert redis_client.xpending(Keys().telemetry_stream("n1"), INGEST_GROUP)["pending"] == 0


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
    second = make_ingest(clock=lambda: time.time() + 100)  # started 100 s after the node's last sample
    second.load_known_nodes()
    assert second.state.nodes["gone"].status == "down"


def test_a_restarted_ingest_skips_what_redis_holds_of_a_node_when_it_is_not_valid(redis_client, make_ingest):
    now = time.time()
    remembered = {
        "good": {"ts": now - 100, "interval": 1.0},
        "not-json": b"{",
        "not-an-object": [1, 2],
        "far-future": {"ts": now, "interval": 1.0, "arrived": 1e308},  # would keep it up for ever
        "text-time": {"ts": "soon", "interval": 1.0},
        "bad-boot": {"ts": now, "interval": 1.0, "boot": 5},
        "bad-restarts": {"ts": now, "interval": 1.0, "restarts": -1},
    }
    redis_client.hset(Keys().known_nodes, mapping={
        name: value if type(value) is bytes else orjson.dumps(value) for name, value in remembered.items()
    })
    ingest = make_ingest()
    ingest.load_known_nodes()
    assert set(ingest.state.nodes) == {"good"} and ingest.state.nodes["good"].status == "down"


def test_minute_rollups_are_written_with_min_mean_max(redis_client, make_ingest):
    ingest = make_ingest()
    minute = 1_700_000_040.0  # a minute boundary
    for second, util in ((0, 10), (20, 30), (40, 50)):
        apply(ingest, sample("n1", gpus=2, ts=minute + second, util=util))
    assert GpuRollup.objects.count() == 0
    ingest.flush()
    rows = GpuRollup.objects.filter(node="n1").order_by("gpu")
    assert rows.count() == 2
    assert (rows[0].util_min, rows[0].util_mean, rows[0].util_max, rows[0].samples) == (10, 30, 50, 3)
    assert rows[0].minute.timestamp() == minute


def test_it_recovers_when_redis_restarts_empty(make_ingest, frames):
    import redis as redis_lib

    from devtools.redis_server import EmbeddedRedis

    server = EmbeddedRedis().start()
    try:
        client = redis_lib.Redis.from_url(server.url, socket_timeout=2)
        ingest = Ingest(client, lambda frame: frames.append(orjson.loads(frame)) or True, stages=STAGES)
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
    assert stage_of(restarted, ProbeStage).tracker.latest["n1"]["status"] == "failed"


def test_a_burst_that_arrives_in_parts_goes_out_in_one_frame(redis_client, make_ingest, frames):
    clock = Clock(999_999.05)
    ingest = make_ingest(clock=clock)
    for name in ("a", "b"):
        xadd(redis_client, schema.encode(sample(name, ts=999_999.0)), at=999_999.0)
    ingest.step()
    ingest.step()
    assert len(frames) == 1
    # The next tick's burst: two collectors finish 100 ms apart.
    clock.now = 1_000_000.05
    xadd(redis_client, schema.encode(sample("a", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert len(frames) == 1, "b is due: the frame waits for it"
    clock.now = 1_000_000.15
    xadd(redis_client, schema.encode(sample("b", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert len(frames) == 2 and set(frames[-1]["nodes"]) == {"a", "b"}


def test_within_a_burst_only_due_nodes_are_read_and_another_nodes_sample_goes_out_in_the_next_frame(
        redis_client, make_ingest, frames):
    """Reads within a burst name the streams of the nodes still due only (an XREADGROUP costs for every
    stream it names); a sample of a node that was not due, here a new one, is read right after the frame."""
    from dashboard.live.ingest import BURST_WAIT_MAX

    clock = Clock(999_999.05)
    ingest = make_ingest(clock=clock)
    for name in ("a", "b"):
        xadd(redis_client, schema.encode(sample(name, ts=999_999.0)), at=999_999.0)
    ingest.step()
    ingest.step()
    clock.now = 1_000_000.05
    xadd(redis_client, schema.encode(sample("a", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    assert len(frames) == 1, "b is due: the burst is open"
    clock.now = 1_000_000.1
    xadd(redis_client, schema.encode(sample("new", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    assert "new" not in ingest.state.nodes, "not due: not read within the burst"
    xadd(redis_client, schema.encode(sample("b", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert len(frames) == 2 and set(frames[-1]["nodes"]) == {"a", "b"}
    clock.now = 1_000_000.2
    ingest.step()  # the read between bursts names every stream
    assert "new" in ingest.state.nodes
    clock.now = 1_000_001.05
    for name in ("a", "b"):
        xadd(redis_client, schema.encode(sample(name, ts=1_000_001.0)), at=1_000_001.0)
    ingest.step()
    clock.now = 1_000_001.0 + BURST_WAIT_MAX * ingest.tick  # new is due now, and does not report again
    ingest.step()
    assert len(frames) == 3 and frames[-1]["nodes"]["new"]["ts"] == 1_000_000.0


def test_a_node_that_does_not_report_holds_the_frame_back_only_briefly(redis_client, make_ingest, frames):
    from dashboard.live.ingest import BURST_WAIT_MAX

    clock = Clock(999_999.05)
    ingest = make_ingest(clock=clock)
    for name in ("a", "silent"):
        xadd(redis_client, schema.encode(sample(name, ts=999_999.0)), at=999_999.0)
    ingest.step()
    ingest.step()
    clock.now = 1_000_000.05
    xadd(redis_client, schema.encode(sample("a", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert len(frames) == 1
    clock.now += BURST_WAIT_MAX * ingest.tick
    ingest.step()
    assert len(frames) == 2 and set(frames[-1]["nodes"]) == {"a"}


def test_a_frame_sent_on_the_tick_alone_does_not_hold_back_the_next_burst(redis_client, make_ingest, frames):
    clock = Clock(1_000_000.5)  # ingest starts mid-tick: its first frame (no samples yet) goes out now
    ingest = make_ingest(clock=clock)
    ingest.step()
    assert len(frames) == 0 or frames[-1]["nodes"] == {}
    clock.now = 1_000_001.05
    xadd(redis_client, schema.encode(sample("a", ts=1_000_001.0)), at=1_000_001.0)
    ingest.step()
    ingest.step()
    assert set(frames[-1]["nodes"]) == {"a"}, "the burst goes out when it is over, not a tick after the last frame"


def test_a_straggler_waits_for_the_next_ticks_frame(redis_client, make_ingest, frames):
    clock = Clock(1_000_000.05)
    ingest = make_ingest(clock=clock)
    xadd(redis_client, schema.encode(sample("a", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    sent = len(frames)
    clock.now = 1_000_000.3
    xadd(redis_client, schema.encode(sample("late", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert len(frames) == sent, "one frame with samples per tick"
    clock.now = 1_000_001.05
    xadd(redis_client, schema.encode(sample("a", ts=1_000_001.0)), at=1_000_001.0)
    ingest.step()
    ingest.step()
    assert len(frames) == sent, "late is due again: the frame waits for its new sample"
    clock.now = 1_000_001.5  # it never comes: its held sample goes out with a
    ingest.step()
    assert frames[-1]["nodes"]["late"]["ts"] == 1_000_000.0 and frames[-1]["nodes"]["a"]["ts"] == 1_000_001.0


def test_samples_read_a_tick_late_do_not_keep_frames_a_tick_behind(redis_client, make_ingest, frames):
    clock = Clock(1_000_001.05)  # ingest was held up: it reads the burst of 1_000_000 a tick late
    ingest = make_ingest(clock=clock)
    xadd(redis_client, schema.encode(sample("a", ts=1_000_000.0)), at=1_000_000.0)
    ingest.step()
    ingest.step()
    assert frames == [], "a sample an interval old is due again: the frame waits for this tick's burst"
    clock.now = 1_000_001.1
    xadd(redis_client, schema.encode(sample("a", ts=1_000_001.0)), at=1_000_001.0)
    ingest.step()
    ingest.step()
    assert [f["nodes"]["a"]["ts"] for f in frames] == [1_000_001.0]
    clock.now = 1_000_002.1
    xadd(redis_client, schema.encode(sample("a", ts=1_000_002.0)), at=1_000_002.0)
    ingest.step()
    ingest.step()
    assert [f["nodes"]["a"]["ts"] for f in frames] == [1_000_001.0, 1_000_002.0], "in step with the collectors"


def test_a_nodes_recent_points_never_exceed_the_limit(redis_client, make_ingest, monkeypatch):
    from dashboard.live.recent import RECENT_TRIM_EVERY

    monkeypatch.setattr("dashboard.live.recent.RECENT_POINTS", 30)
    ingest = make_ingest()
    lengths = []
    for second in range(45):
        apply(ingest, sample("n1", ts=1_700_000_000.0 + second))
        ingest.emit(time.time())
        lengths.append(redis_client.llen(Keys().recent("n1")))
    assert max(lengths) <= 30 and min(lengths[30:]) >= 30 - RECENT_TRIM_EVERY
    newest = orjson.loads(redis_client.lindex(Keys().recent("n1"), 0))
    assert newest[0] == 1_700_000_044.0 and len(newest[1]) == 2


def test_a_firing_alert_flags_its_gpu_in_the_next_frame_and_clears_with_it(redis_client, make_ingest, frames):
    from dashboard.alerts.evaluate import AlertEvaluator
    from dashboard.alerts.models import Rule
    from dashboard.live.frames import FLAG_ALERT

    Rule.objects.all().delete()
    Rule.objects.create(name="hot", metric="gpu.temp", comparison=">", threshold=80, for_seconds=0)
    ingest = make_ingest(stages=with_alerts(AlertEvaluator(enqueue=lambda transition_ids: None)))
    hot = sample("n1", gpus=2)
    hot["gpus"][1]["temp"] = 91
    apply(ingest, hot)
    ingest.emit(time.time())  # evaluated after this frame went out
    apply(ingest, sample("n1", gpus=2, ts=hot["ts"] + 1) | {"gpus": hot["gpus"]})
    ingest.emit(time.time())
    rows = frames[-1]["nodes"]["n1"]["gpus"]
    assert rows[1][-1] & FLAG_ALERT and not rows[0][-1] & FLAG_ALERT
    snapshot = orjson.loads(redis_client.get(Keys().snapshot))
    assert snapshot["nodes"]["n1"]["gpus"][1][-1] & FLAG_ALERT
    apply(ingest, sample("n1", gpus=2, ts=hot["ts"] + 2))  # back to 60 °C: resolved
    ingest.emit(time.time())
    ingest.emit(time.time())  # no new sample: the cleared flag still reaches browsers
    assert not frames[-1]["nodes"]["n1"]["gpus"][1][-1] & FLAG_ALERT


def test_a_minute_written_in_parts_merges_into_one_row(make_ingest):
    ingest = make_ingest()
    minute = 1_700_000_040.0
    for second, util, power in ((0, 10, None), (20, 30, 300.0)):
        apply(ingest, sample("n1", gpus=1, ts=minute + second, util=util, power=power))
        ingest.flush()
    apply(ingest, sample("n1", gpus=1, ts=minute + 40, util=50, power=100.0))
    apply(ingest, sample("n1", gpus=1, ts=minute + 60, util=99))  # the next minute
    assert stage_of(ingest, RollupStage).write() == 2
    row = GpuRollup.objects.get(node="n1", minute__lt=dt.datetime.fromtimestamp(minute + 60, dt.UTC))
    assert (row.samples, row.util_min, row.util_mean, row.util_max, row.util_count) == (3, 10, 30, 50, 3)
    assert (row.power_min, row.power_mean, row.power_max, row.power_count) == (100.0, 200.0, 300.0, 2)
    assert GpuRollup.objects.count() == 2


def test_rollups_skip_null_readings_and_lost_gpus_and_count_a_backlog_in_one_batch(make_ingest):
    ingest = make_ingest()
    minute = 1_700_000_040.0
    # In stream order: rollups take each entry once, by its id.
    apply(ingest, sample("n2", gpus=1, ts=minute, power=None))
    for second, power in ((0, 300.0), (1, None), (2, 500.0)):  # applied together, as a flushed backlog is
        s = sample("n1", gpus=2, ts=minute + second, power=power)
        s["gpus"][1] = {"index": 1, "uuid": "GPU-1", "lost": True, **{m: None for m in schema.GPU_METRIC_NAMES}}
        apply(ingest, s)
    ingest.flush()
    rows = {(r.node, r.gpu): r for r in GpuRollup.objects.all()}
    assert set(rows) == {("n1", 0), ("n2", 0)}, "a lost GPU has no readings to roll up"
    n1 = rows[("n1", 0)]
    assert (n1.samples, n1.power_min, n1.power_mean, n1.power_max) == (3, 300.0, 400.0, 500.0)
    assert (rows[("n2", 0)].power_min, rows[("n2", 0)].power_mean, rows[("n2", 0)].power_max) == (None, None, None)
    assert rows[("n2", 0)].util_mean == 50.0
