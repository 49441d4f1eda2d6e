"""Ingest and node health: the Redis hash, frames, and verdict changes in the database, outages included."""

import itertools

import orjson
import pytest
from django.db import connection

from dashboard.health.models import HealthChange
from dashboard.health.stage import HealthStage
from dashboard.live.ingest import Ingest
from gpulse import health
from gpulse.keys import Keys
from tests.clock import Clock
from tests.ingest_stages import STAGES, stage_of
from tests.samples import sample
from tests.test_node_health import NVLINK_DOWN, finding, with_health

pytestmark = pytest.mark.django_db

START = 1_800_000_000.0
ENTRY_SEQ = itertools.count()


@pytest.fixture
def frames():
    return []


@pytest.fixture
def clock():
    return Clock(START)


@pytest.fixture
def ingest(redis_client, frames, clock):
    def publish(frame: bytes) -> bool:
        frames.append(orjson.loads(frame))
        return True

    return Ingest(redis_client, publish, clock=clock, stages=STAGES)


def send(ingest, clock, reading: dict) -> None:
    reading["ts"] = clock.now
    ingest.apply(reading, f"{int(clock.now * 1000)}-{next(ENTRY_SEQ)}".encode())


def tick(ingest, clock, seconds: float = 1.0) -> None:
    ingest.emit(clock.now)
    clock.now += seconds


def stored(redis_client, name: str) -> dict | None:
    raw = redis_client.hget(Keys().health, name)
    return None if raw is None else orjson.loads(raw)


def test_the_health_hash_is_written_when_a_node_changes_and_only_then(ingest, clock, redis_client):
    send(ingest, clock, with_health("n1", NVLINK_DOWN))
    send(ingest, clock, with_health("n2"))
    tick(ingest, clock)
    record = stored(redis_client, "n1")
    assert record["verdict"] == "failing" and record["since"] == START
    assert record["findings"] == [{"check": "nvlink_state", "gpu": 3, "status": "fail", "reason": "link 2 down, 17 up",
                                   "action": health.action("nvlink_state", "fail"), "since": START}]
    assert stored(redis_client, "n2")["verdict"] == "healthy"

    # Unchanged: not written again (the entries removed here stay away).
    redis_client.delete(Keys().health)
    send(ingest, clock, with_health("n1", NVLINK_DOWN))
    send(ingest, clock, with_health("n2"))
    tick(ingest, clock)
    assert redis_client.hlen(Keys().health) == 0

    send(ingest, clock, with_health("n1"))
    send(ingest, clock, with_health("n2"))
    tick(ingest, clock)
    assert stored(redis_client, "n1")["verdict"] == "healthy" and stored(redis_client, "n2") is None


def test_a_restarted_ingest_frames_a_down_node_known_from_before_as_unknown(ingest, clock, redis_client, frames):
    send(ingest, clock, sample("gone"))
    tick(ingest, clock)
    redis_client.delete(Keys().health)  # as an ingest before node health left it
    clock.now += 600
    restarted = Ingest(redis_client, lambda frame: frames.append(orjson.loads(frame)) or True, clock=clock,
                       stages=STAGES)
    restarted.load_known_nodes()
    restarted.emit(clock.now)
    assert frames[-1]["nodes"]["gone"]["health"]["verdict"] == "unknown"
    assert frames[-1]["nodes"]["gone"]["health"]["reason"].startswith("node down")


def test_a_forgotten_node_leaves_the_health_hash(ingest, clock, redis_client):
    send(ingest, clock, with_health("n1"))
    tick(ingest, clock)
    ingest.forget_node("n1")
    assert stored(redis_client, "n1") is None


def test_frames_carry_each_nodes_health(ingest, clock, frames):
    send(ingest, clock, with_health("sick", NVLINK_DOWN))
    send(ingest, clock, with_health("fine"))
    tick(ingest, clock)
    nodes = frames[-1]["nodes"]
    assert nodes["fine"]["health"] == {"verdict": "healthy"}
    assert nodes["sick"]["health"] == {
        "verdict": "failing", "reason": "GPU 3 NVLink links: link 2 down, 17 up",
        "action": health.action("nvlink_state", "fail"), "since": START, "findings": 1}


def test_a_delta_carries_a_node_whose_verdict_changed_without_a_sample(ingest, clock, frames):
    for name, driver in (("a", "550.54.15"), ("b", "550.54.15"), ("c", "535.104.05")):
        send(ingest, clock, with_health(name, driver=driver))
    tick(ingest, clock)
    assert frames[-1]["nodes"]["c"]["health"]["verdict"] == "degraded"
    # a and b move to c's driver: c, which sent nothing this tick, is now the majority.
    for name in ("a", "b"):
        send(ingest, clock, with_health(name, driver="535.104.05"))
    tick(ingest, clock)
    assert frames[-1]["nodes"]["c"]["health"] == {"verdict": "healthy"}


def test_each_verdict_change_is_a_row_with_its_reason(ingest, clock):
    send(ingest, clock, with_health("n1"))
    tick(ingest, clock)
    send(ingest, clock, with_health("n1", finding("row_remap", "warn", "a remap is pending", gpu=1)))
    tick(ingest, clock)
    send(ingest, clock, with_health("n1", finding("row_remap", "warn", "a remap is pending", gpu=1)))
    tick(ingest, clock)
    rows = list(HealthChange.objects.filter(node="n1").order_by("at").values_list("old", "new", "reason"))
    assert rows == [("unknown", "healthy", ""), ("healthy", "degraded", "GPU 1 Row remapping: a remap is pending")]


# Outside a test transaction: the outage closes the connection, as it does in production.
@pytest.mark.django_db(transaction=True)
def test_verdict_changes_wait_out_a_database_outage(ingest, clock):
    send(ingest, clock, with_health("n1"))
    tick(ingest, clock)
    with connection.cursor() as cursor:  # the table is away: every write of it fails, as in an outage
        cursor.execute("ALTER TABLE live_healthchange RENAME TO live_healthchange_away")
    try:
        send(ingest, clock, with_health("n1", NVLINK_DOWN))
        tick(ingest, clock)
        assert ingest.database.describe() is not None
        assert [(c.old, c.new) for c in stage_of(ingest, HealthStage).changes.pending] == [("healthy", "failing")]
        assert ingest.heartbeat(clock.now)["health"] == {"pending_changes": 1, "lost_changes": 0}
        send(ingest, clock, with_health("n1"))
        tick(ingest, clock)  # ingest goes on: frames and the hash are written meanwhile
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE live_healthchange_away RENAME TO live_healthchange")
    for _ in range(3):  # past the retry backoff
        send(ingest, clock, with_health("n1"))
        tick(ingest, clock)
    assert ingest.database.describe() is None and stage_of(ingest, HealthStage).changes.pending == []
    assert list(HealthChange.objects.order_by("at", "id").values_list("old", "new")) == [
        ("unknown", "healthy"), ("healthy", "failing"), ("failing", "healthy")]


@pytest.mark.django_db(transaction=True)
def test_verdict_changes_waiting_for_the_database_are_bounded(ingest, clock):
    stage_of(ingest, HealthStage).changes.max_rows = 2
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE live_healthchange RENAME TO live_healthchange_away")
    try:
        for name in ("a", "b", "c"):
            send(ingest, clock, with_health(name))
        tick(ingest, clock)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE live_healthchange_away RENAME TO live_healthchange")
    assert len(stage_of(ingest, HealthStage).changes.pending) == 2 and stage_of(ingest, HealthStage).changes.lost == 1
