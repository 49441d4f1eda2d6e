"""Usage accounting through ingest into the database, and the API over it (a real Redis and database)."""

import datetime as dt
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from dashboard.live.frames import gpu_row
from dashboard.live.models import ClusterUsage, GpuRollup, GpuUsage, UsageHour
from dashboard.rollups.accumulator import RollupAccumulator
from dashboard.rollups.stage import RollupStage
from dashboard.usage.idle import IdleAllocations
from dashboard.usage.models import EnergyPrice, GpuPrice
from dashboard.usage.prices import current_prices
from dashboard.usage.stage import IdleStage, idle_summary
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from gpulse.usage import is_allocated, is_idle_allocated, owner
from tests import fake_nvml
from tests.ingest_stages import rollups_of, stage_of
from tests.samples import gpu, sample
from tests.test_ingest import apply, entry_at, frames, make_ingest, xadd  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def process(user, job, mem=2**33, **more):
    return {"pid": 4000 + int(job or 0) % 1000, "name": "python", "user": user, "mem_used": mem, "job": job,
            "step": "0", "cmd": f"python train.py # {job}", **more}


def node_sample(node, ts, gpus, interval=1.0):
    """``gpus``: per GPU index, (util, processes, energy mJ or None, power W, model)."""
    s = sample(node, gpus=0, ts=ts, interval=interval)
    s["gpus"] = [gpu(i, util=util, processes=procs, power=power, name=model, **({"energy": energy} if energy else {}))
                 for i, (util, procs, energy, power, model) in enumerate(gpus)]
    return s


def test_each_gpu_minute_counts_allocated_busy_seconds_and_energy_per_owner(make_ingest):  # noqa: F811
    ingest = make_ingest()
    minute = 1_700_000_040.0
    for second in range(60):
        apply(ingest, node_sample("n1", minute + second, [
            (95, [process("alice", "100")], 1_000_000 + 400_000 * second, 400.0, H100),  # 400 W by its counter
            (0, [process("dana", "101")], None, 90.0, H100),  # no counter: power × interval
            (0, [], 5_000_000 + 60_000 * second, 60.0, H100),  # nobody's
        ]))
    ingest.flush()
    rows = {(r.gpu, r.user, r.job): r for r in GpuUsage.objects.filter(node="n1")}
    assert set(rows) == {(0, "alice", "100"), (1, "dana", "101"), (2, "", "")}
    busy, idle, free = rows[(0, "alice", "100")], rows[(1, "dana", "101")], rows[(2, "", "")]
    assert (busy.samples, busy.seconds, busy.allocated_seconds, busy.busy_seconds) == (60, 60.0, 60.0, 60.0)
    assert (idle.allocated_seconds, idle.busy_seconds) == (60.0, 0.0)
    assert (free.allocated_seconds, free.busy_seconds, free.seconds) == (0.0, 0.0, 60.0)
    # The first sample has no delta yet (power × interval); then 59 deltas of the counter.
    assert busy.energy_j == pytest.approx(400.0 + 59 * 400.0)
    assert idle.energy_j == pytest.approx(60 * 90.0)
    assert free.energy_j == pytest.approx(60.0 + 59 * 60.0)
    assert busy.model == H100
    hour = UsageHour.objects.get(user="alice")
    assert (hour.node, hour.job, hour.model, hour.allocated_seconds) == ("n1", "100", H100, 60.0)
    cluster = ClusterUsage.objects.get()
    assert (cluster.seconds, cluster.allocated_seconds, cluster.busy_seconds) == (180.0, 120.0, 60.0)


def test_a_gpu_that_changes_hands_within_a_minute_has_a_row_per_owner(make_ingest):  # noqa: F811
    ingest = make_ingest()
    minute = 1_700_000_040.0
    for second in range(30):
        apply(ingest, node_sample("n1", minute + second, [(90, [process("alice", "100")], None, 300.0, H100)]))
    for second in range(30, 60):
        apply(ingest, node_sample("n1", minute + second, [(90, [process("bob", "102")], None, 300.0, H100)]))
    ingest.flush()
    assert sorted(GpuUsage.objects.values_list("user", "allocated_seconds")) == [("alice", 30.0), ("bob", 30.0)]


def test_the_owner_is_the_process_holding_the_most_memory_and_the_pod_from_k8s(make_ingest):  # noqa: F811
    ingest = make_ingest()
    s = node_sample("n1", 1_700_000_040.0, [(90, [process("root", None, mem=2**20),
                                                  process("erin", "200", mem=2**34)], None, 300.0, H100)])
    s["gpus"][0]["k8s"] = {"pod": "llama-ft-0", "namespace": "ml", "container": "trainer"}
    apply(ingest, s)
    ingest.flush()
    assert GpuUsage.objects.values_list("user", "job", "pod").get() == ("erin", "200", "ml/llama-ft-0")


def test_entries_read_again_after_a_write_are_not_counted_twice(make_ingest):  # noqa: F811
    ingest = make_ingest()
    entries = [(entry_at(1_700_000_040.0 + s), node_sample("n1", 1_700_000_040.0 + s,
                                                             [(90, [process("alice", "100")], None, 300.0, H100)]))
               for s in range(10)]
    for entry_id, s in entries:
        ingest.apply(s, entry_id)
    ingest.flush()
    again = make_ingest()  # a restarted ingest, re-reading entries whose acknowledgement was lost
    for entry_id, s in entries:
        again.apply(s, entry_id)
    again.flush()
    row = GpuUsage.objects.get()
    assert (row.samples, row.allocated_seconds) == (10, 10.0)
    assert UsageHour.objects.get().samples == 10 and ClusterUsage.objects.get().samples == 10


def test_usage_written_less_often_than_the_rollups_is_counted_once_after_a_crash(redis_client, make_ingest):  # noqa: F811
    def entries(seconds):
        return [(entry_at(1_700_000_040.0 + s), node_sample("n1", 1_700_000_040.0 + s,
                                                              [(90, [process("alice", "100")], None, 300.0, H100)]))
                for s in seconds]

    ingest = make_ingest()
    first, then = entries(range(10)), entries(range(10, 15))
    for entry_id, s in first:
        ingest.apply(s, entry_id)
    ingest.flush()  # rollups and usage of the first 10 s
    for entry_id, s in then:
        ingest.apply(s, entry_id)
    stage_of(ingest, RollupStage).write(usage=False)  # the rollups of the next 5 s; their usage waits
    assert GpuRollup.objects.get().samples == 15 and GpuUsage.objects.get().samples == 10
    again = make_ingest()  # killed: a restarted ingest reads the pending entries again, and all before them
    for entry_id, s in first + then:
        again.apply(s, entry_id)
    stage_of(again, RollupStage).write(usage=False)
    assert GpuRollup.objects.get().samples == 15 and GpuUsage.objects.get().samples == 10
    again.flush()
    assert GpuRollup.objects.get().samples == 15, "the rollups were written: the entries count for their usage alone"
    row = GpuUsage.objects.get()
    assert (row.samples, row.allocated_seconds) == (15, 15.0)
    assert UsageHour.objects.get().samples == 15 and ClusterUsage.objects.get().samples == 15
    assert rollups_of(again).duplicates == 10


def in_one_minute_for(back: float, ahead: float) -> None:
    """Sleep, if need be, until the last ``back`` seconds and the next ``ahead`` fall in one wall-clock minute:
    samples stamped across a minute's end make two rollups (a full run that reached it 1 s into a minute did)."""
    into = time.time() % 60
    if into < back:
        time.sleep(back - into)
    elif into > 60 - ahead:
        time.sleep(60 - into + back)


def test_entries_stay_pending_until_their_usage_is_written(redis_client, make_ingest, settings):  # noqa: F811
    settings.GPULSE_ROLLUP_FLUSH_INTERVAL, settings.GPULSE_USAGE_FLUSH_INTERVAL = 0.0, 3600.0
    ingest = make_ingest()
    in_one_minute_for(back=3.5, ahead=2.0)  # three samples stamped 3 to 1 s ago, one now
    for second in range(3):
        xadd(redis_client, schema.encode(node_sample("n1", time.time() - 3 + second,
                                                     [(90, [process("alice", "100")], None, 300.0, H100)])))
    ingest.read(block_ms=10)
    ingest.use_database(time.time())  # the first write takes the usage too
    assert redis_client.xpending(Keys().telemetry_stream("n1"), INGEST_GROUP)["pending"] == 0
    xadd(redis_client, schema.encode(node_sample("n1", time.time(),
                                                 [(90, [process("alice", "100")], None, 300.0, H100)])))
    ingest.read(block_ms=10)
    ingest.use_database(time.time())  # the rollups only: the usage is due in an hour
    assert GpuRollup.objects.get().samples == 4 and GpuUsage.objects.get().samples == 3
    assert redis_client.xpending(Keys().telemetry_stream("n1"), INGEST_GROUP)["pending"] == 1
    ingest.finish()  # a deploy's SIGTERM writes it all
    assert GpuUsage.objects.get().samples == 4
    assert redis_client.xpending(Keys().telemetry_stream("n1"), INGEST_GROUP)["pending"] == 0


def accumulator(busy_util: float = 5.0) -> RollupAccumulator:
    """Ingest's accumulator, as though the checkpoint were read (nothing here writes)."""
    rollups = RollupAccumulator(Keys().telemetry_stream, INGEST_GROUP, busy_util=busy_util)
    rollups.resume({})
    return rollups


def fold(rollups: RollupAccumulator, *samples: dict) -> list[tuple]:
    """Fold the samples in one go; return the usage rows of every minute so far."""
    for s in samples:
        rollups.add(s)
    rollups.fold_queued()
    return rollups.usage_rows()[0]


ENERGY = 12  # a usage row's column: after its key and the other sums (dashboard.rollups.usage_store.GPU_COLUMNS)


@pytest.mark.parametrize("readings, expected", [
    ([(0.0, 1000), (1.0, 401_000)], [100.0, 400.0]),  # a delta of 400 J over 1 s
    ([(0.0, 1000), (1.0, 500)], [100.0, 100.0]),  # the counter went back (driver reload): power × interval
    ([(0.0, 1000), (10.0, 401_000)], [100.0, 100.0]),  # a gap of 10 intervals: not this sample's energy
    ([(0.0, 1000), (1.0, 10**12)], [100.0, 100.0]),  # a million kW: not a GPU, power × interval
    ([(0.0, None), (1.0, None)], [100.0, 100.0]),  # no counter
])
def test_energy_comes_from_the_counters_deltas_where_they_can_be_trusted(readings, expected):
    rollups = accumulator()
    totals = [fold(rollups, node_sample("n1", ts, [(50, [], counter, 100.0, H100)]))[0][ENERGY]
              for ts, counter in readings]
    assert [totals[0], totals[1] - totals[0]] == pytest.approx(expected)


def test_a_counter_held_for_an_hour_cannot_pour_the_hour_into_one_reading():
    """A node is untrusted: one that repeats its counter for an hour, then jumps by 5 kW x 1 h, would put
    18 MJ in one GPU-minute of one owner. A delta is trusted over a minute since the counter moved at most."""
    rollups = accumulator()
    readings = [(float(second), 1000) for second in range(3600)] + [(3600.0, 1000 + 5_000_000 * 3600)]
    totals = [fold(rollups, node_sample("n1", ts, [(50, [], counter, 100.0, H100)]))[-1][ENERGY]
              for ts, counter in readings]
    assert totals[-1] == pytest.approx(100.0)  # power x interval: the jump is not this reading's


def test_a_late_sample_takes_power_times_interval_and_leaves_the_counters_reference_alone():
    rollups = accumulator()
    for ts in (10.0, 12.0, 11.0, 13.0):  # 11 arrives late (a backlog); the counter runs at 100 W
        rows = fold(rollups, node_sample("n1", ts, [(50, [], 100_000 * ts, 100.0, H100)]))
    # 100 J (first: power × interval) + 200 J (10 → 12) + 100 J (late: power × interval) + 100 J (12 → 13);
    # had the late sample become the reference, 11 → 13 would count 11 → 12 twice.
    assert rows[0][ENERGY] == pytest.approx(500.0)


def test_a_backlog_folded_at_once_counts_as_its_samples_one_by_one():
    """After an outage a node's samples arrive together: each GPU's readings take their turns, in stream order."""
    readings = [(10.0, 1_000_000), (11.0, 1_400_000), (13.0, 1_800_000), (12.0, 1_700_000), (14.0, 500)]
    samples = [node_sample("n1", ts, [(50, [process("alice", "1")], counter, 100.0, H100),
                                      (0, [], None, 60.0, H100)]) for ts, counter in readings]
    at_once = fold(accumulator(), *samples)
    one_by_one = accumulator()
    for s in samples:
        rows = fold(one_by_one, s)
    assert at_once == rows
    # 100 J, 400 J, 400 J (11 → 13), 100 J (late), 100 J (the counter went back); GPU 1: 5 × 60 J.
    assert [row[ENERGY] for row in at_once] == pytest.approx([1100.0, 300.0])


@pytest.mark.parametrize("free_first", [False, True])
def test_allocated_to_nobody_known_and_free_in_one_minute_is_one_row(free_first):
    """A process the collector could not attribute, and none: both are (node, GPU, minute, "", "", "")."""
    unattributed = node_sample("n1", 60.0, [(50, [process(None, None)], None, 100.0, H100)])
    free = node_sample("n1", 61.0, [(0, [], None, 100.0, H100)])
    rows = fold(accumulator(), *((free, unattributed) if free_first else (unattributed, free)))
    assert [row[3:] for row in rows] == [("", "", "", H100, 2, 2.0, 1.0, 1.0, 0.0, 200.0, "", "")]


def test_a_pruned_nodes_gpu_ids_go_to_new_gpus_only_once_its_minutes_are_written(make_ingest):  # noqa: F811
    ingest = make_ingest()
    ingest.flush()  # reads the checkpoint: from here on, samples fold as they come
    apply(ingest, node_sample("old", 1_700_000_040.0, [(50, [process("alice", "1")], 10**6, 100.0, H100)]))
    rollups_of(ingest).fold_queued()
    rollups_of(ingest).forget("old")
    apply(ingest, node_sample("new", 1_700_000_041.0, [(50, [process("bob", "2")], 10**6 + 100_000, 100.0, A100)]))
    rollups_of(ingest).fold_queued()
    assert len(rollups_of(ingest).gpus) == 2  # the id is not reused while "old"'s minute is unwritten
    ingest.flush()
    apply(ingest, node_sample("newer", 1_700_000_042.0, [(50, [], 10**6 + 200_000, 100.0, A100)]))
    ingest.flush()
    assert len(rollups_of(ingest).gpus) == 2  # now it is
    # Each GPU counted under its own name; "newer" took no delta from "old"'s counter.
    assert sorted(GpuUsage.objects.values_list("node", "user", "energy_j")) == [
        ("new", "bob", 100.0), ("newer", "", 100.0), ("old", "alice", 100.0)]


def random_gpus(rng: random.Random, count: int) -> list[dict]:
    """GPUs of every shape the accounting tells apart: no process, one, several, a pod, lost, no utilization."""
    gpus = []
    for index in range(count):
        processes = [process(rng.choice(["alice", "bob", None]), rng.choice(["100", None]),
                             mem=rng.choice([None, 2**30, 2**34]),
                             pod_uid=rng.choice([None, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"]))
                     for _ in range(rng.choice([0, 0, 1, 1, 1, 3]))]
        reading = gpu(index, util=rng.choice([None, 0, 4.9, 5, 60]), processes=processes)
        if rng.random() < 0.2:
            reading["k8s"] = {"pod": rng.choice([None, "nb-0"]), "namespace": "ml", "container": None}
        if rng.random() < 0.05:
            reading["lost"] = True
        gpus.append(reading)
    return gpus


def test_ingests_inlined_definitions_agree_with_gpulse_usage():
    rng = random.Random(11)
    gpus = random_gpus(rng, 400)
    s = sample("n1", gpus=0, ts=1_700_000_040.0)
    s["gpus"] = gpus
    counted = {(row[1], *row[3:6]): row[9:11] for row in fold(accumulator(), s)}  # (gpu, owner) -> (allocated, busy)
    idle = IdleAllocations()
    idle.update("n1", s, 0.0, [gpu_row(reading, busy_util=5.0) for reading in gpus])
    for reading in gpus:
        index = reading["index"]
        if reading.get("lost"):
            assert not any(key[0] == index for key in counted) and (index, "") not in idle.entries.get("n1", {})
            continue
        who = tuple(owner(reading)) if is_allocated(reading) else ("", "", "")
        util = reading["util"]
        busy = is_allocated(reading) and util is not None and util >= 5.0
        assert counted[(index, *who)] == (1.0 if is_allocated(reading) else 0.0, 1.0 if busy else 0.0), reading
        assert ((index, "") in idle.entries.get("n1", {})) == bool(is_idle_allocated(reading, 5.0)), reading


def test_with_accounting_off_ingest_keeps_its_rollups_and_no_usage(redis_client, make_ingest, settings):  # noqa: F811
    redis_client.set(Keys().idle_allocations, orjson.dumps([{"node": "n0", "gpu": 0, "since": 1.0}]))
    settings.GPULSE_USAGE_ACCOUNTING = False
    ingest = make_ingest()
    for second in range(3):
        apply(ingest, node_sample("n1", 1_700_000_040.0 + second, [(0, [process("dana", "101")], 10**6, 90.0, H100)]))
    ingest.emit(time.time())
    ingest.flush()
    assert GpuRollup.objects.get().samples == 3
    assert not GpuUsage.objects.exists() and not UsageHour.objects.exists() and not ClusterUsage.objects.exists()
    assert orjson.loads(redis_client.get(Keys().idle_allocations)) == []  # an earlier ingest's list cleared
    assert stage_of(ingest, IdleStage).summary() == {"idle_allocated": None}  # the KPI shows a dash, not "0 GPUs"


# Outside a test transaction: the outage closes the connection, as it does in production.
@pytest.mark.django_db(transaction=True)
def test_usage_dropped_at_the_bound_during_an_outage_is_counted_in_the_heartbeat_and_metrics(
        make_ingest, admin_client, settings):  # noqa: F811
    """A GPU that changes hands within a minute is one rollup row but a usage row per owner: its usage
    reaches GPULSE_ROLLUP_MAX_ROWS first, and what the bound drops of it is counted on its own."""
    settings.GPULSE_ROLLUP_MAX_ROWS = 3
    ingest = make_ingest()
    ingest.flush()  # reads the checkpoint: from here on, samples fold as they come
    with connection.cursor() as cursor:  # the table is away: every write fails, as in an outage
        cursor.execute("ALTER TABLE live_gpuusage RENAME TO live_gpuusage_away")
    try:
        for minute in range(2):  # 2 rollup rows, 4 usage rows: the oldest usage minute (2 samples) goes
            for second, (user, job) in enumerate([("alice", "100"), ("bob", "200")]):
                apply(ingest, node_sample("n1", 1_700_000_040.0 + 60 * minute + second,
                                          [(90, [process(user, job)], None, 300.0, H100)]))
        ingest.emit(time.time())
        assert ingest.database.describe() is not None
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE live_gpuusage_away RENAME TO live_gpuusage")
    beat = ingest.heartbeat(time.time())["rollups"]
    assert (beat["lost_samples"], beat["lost_usage_samples"]) == (0, 2)
    ingest.emit(time.time())  # the heartbeat in Redis is written before the tick's rollup write
    lost = {s.name: s.value for f in text_string_to_metric_families(admin_client.get("/metrics").content.decode())
            for s in f.samples if s.name.startswith("gpulse_ingest_lost")}
    assert lost == {"gpulse_ingest_lost_samples_total": 0, "gpulse_ingest_lost_usage_samples_total": 2}
    ingest.flush()
    # What was sent is what was written plus what was counted as lost, for the rollups and for the usage.
    assert sum(GpuRollup.objects.values_list("samples", flat=True)) == 4
    assert sum(GpuUsage.objects.values_list("samples", flat=True)) == 4 - 2


def test_a_counter_read_every_10_s_keeps_the_energy_totals_exact(make_ingest):  # noqa: F811
    """The nvml source reads the energy counter every 10 s (collectors/nvml.py, ENERGY_READ_INTERVAL) and
    repeats it between reads: each read's delta carries the 10 s before it, so no joule is lost or counted
    twice; a minute's energy can move by up to 10 s into the next."""
    ingest = make_ingest()
    start = 1_700_000_040.0
    for second in range(180):
        # 700 W, an H100 at its cap, as last read at a multiple of 10 s: each read adds 7 kJ a second after
        # the previous sample, more than any GPU draws in a second, but not in the 10 s since the last read.
        counter = 1_000_000 + 700_000 * (second // 10 * 10)
        apply(ingest, node_sample("n1", start + second, [(95, [process("alice", "100")], counter, 700.0, H100)]))
    ingest.flush()
    minutes = [row.energy_j for row in GpuUsage.objects.filter(node="n1").order_by("minute")]
    # The first sample has no delta yet (power × interval); then the reads at 10 s, 20 s, ... 170 s.
    assert sum(minutes) == pytest.approx(700.0 + 170 * 700.0)
    assert all(abs(joules - 60 * 700.0) <= 10 * 700.0 for joules in minutes)


@pytest.mark.parametrize("accounting", [True, False])
def test_samples_dropped_before_the_checkpoint_is_read_count_as_lost_usage_too(accounting):
    """The database down since ingest started: samples wait whole, and one dropped loses its usage with it."""
    rollups = RollupAccumulator(Keys().telemetry_stream, INGEST_GROUP, max_rows=2, accounting=accounting)
    for second in range(3):
        rollups.add(node_sample("n1", 1_700_000_040.0 + second, [(90, [process("alice", "100")], None, 300.0, H100),
                                                                 (0, [], None, 60.0, H100)]))
    rollups.fold_queued()
    assert rollups.lost_samples == 2
    assert rollups.lost_usage_samples == (2 if accounting else 0)  # without accounting, no usage to lose


# -- the API and the page's numbers ------------------------------------------------------------------------------

OWNERS = [("alice", "100", 95, H100), ("alice", "103", 40, H100), ("bob", "102", 0, A100), ("dana", "101", 0, H100)]


@pytest.fixture
def three_hours(make_ingest):  # noqa: F811
    """Three hours of two nodes, a sample every 30 s, owners changing by the hour; one GPU nobody holds."""
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 4) * 3600
    for step in range(3 * 120):
        ts = start + 30 * step
        hour = step // 120
        for n, node in enumerate(("n1", "n2")):
            user, job, util, model = OWNERS[(hour + n) % len(OWNERS)]
            apply(ingest, node_sample(node, ts, [
                (util, [process(user, job)], 10**9 + 9_000_000 * step, 300.0, model),
                (0, [], None, 60.0, model),
            ], interval=30.0))
    ingest.flush()
    return start


def independent_sums(by: str) -> dict:
    """From the per-minute rows, in plain Python: gpu_hours, idle_gpu_hours, kwh and cost per group."""
    price = {H100: 3.0, A100: 1.5}
    sums: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for row in GpuUsage.objects.all():
        if by != "node" and row.allocated_seconds == 0:
            continue
        group = sums[getattr(row, by)]
        group["gpu_hours"] += row.allocated_seconds / 3600
        group["idle_gpu_hours"] += (row.allocated_seconds - row.busy_seconds) / 3600
        group["kwh"] += row.energy_j / 3.6e6
        group["cost"] += row.allocated_seconds / 3600 * price[row.model]
    return sums


@pytest.mark.parametrize("by", ["user", "job", "node"])
def test_the_api_agrees_with_an_independent_sum_over_the_minute_rows(viewer, three_hours, by):
    GpuPrice.objects.create(gpu_model=H100, usd_per_gpu_hour="3.00")
    GpuPrice.objects.create(gpu_model=A100, usd_per_gpu_hour="1.50")
    EnergyPrice.objects.create(usd_per_kwh="0.20")
    answer = viewer.get(f"/api/v1/usage?by={by}&since={three_hours}&until={three_hours + 3 * 3600}").json()
    expected = independent_sums(by)
    assert {row[by] for row in answer["rows"]} == set(expected)
    for row in answer["rows"]:
        for figure in ("gpu_hours", "idle_gpu_hours", "kwh", "cost"):
            assert row[figure] == pytest.approx(expected[row[by]][figure]), (row[by], figure)
        assert row["energy_cost"] == pytest.approx(row["kwh"] * 0.20)
    assert answer["totals"]["gpu_hours"] == pytest.approx(sum(g["gpu_hours"] for g in expected.values()))
    assert [row["cost"] for row in answer["rows"]] == sorted((row["cost"] for row in answer["rows"]), reverse=True)


def test_usage_by_user_reads_as_a_platform_team_would(viewer, three_hours):
    answer = viewer.get(f"/api/v1/usage?by=user&since={three_hours}&until={three_hours + 3 * 3600}").json()
    users = {row["user"]: row for row in answer["rows"]}
    # Each hour, each node's first GPU has one owner at a 30 s interval: 1 GPU-hour per owner-hour.
    dana = users["dana"]
    assert dana["busy_pct"] == 0 and dana["idle_gpu_hours"] == pytest.approx(dana["gpu_hours"])
    assert users["alice"]["busy_pct"] == pytest.approx(100.0)
    assert sum(row["gpu_hours"] for row in answer["rows"]) == pytest.approx(6.0)
    by_node = viewer.get(f"/api/v1/usage?by=node&since={three_hours}&until={three_hours + 3 * 3600}").json()
    assert {row["node"]: row["allocated_pct"] for row in by_node["rows"]} == pytest.approx({"n1": 50.0, "n2": 50.0})


def test_limit_keeps_the_costliest_groups_and_the_totals_of_all(viewer, three_hours):
    span = f"since={three_hours}&until={three_hours + 3 * 3600}"
    every = viewer.get(f"/api/v1/usage?by=job&{span}").json()
    two = viewer.get(f"/api/v1/usage?by=job&{span}&limit=2").json()
    assert two["rows"] == every["rows"][:2] and len(every["rows"]) > 2
    assert two["totals"] == every["totals"]


def test_the_range_is_whole_hours_and_a_range_outside_the_data_is_empty(viewer, three_hours):
    inside = viewer.get(f"/api/v1/usage?by=user&since={three_hours + 600}&until={three_hours + 3600 - 600}").json()
    assert (inside["since"], inside["until"]) == (three_hours, three_hours + 3600)
    assert sum(row["gpu_hours"] for row in inside["rows"]) == pytest.approx(2.0)
    before = viewer.get(f"/api/v1/usage?by=user&since={three_hours - 7200}&until={three_hours}").json()
    assert before["rows"] == [] and before["totals"]["gpu_hours"] == 0


@pytest.mark.parametrize("query, message", [
    ("by=team", "'by' is one of user, job, node, not 'team'"),
    ("since=yesterday", "not a time: 'yesterday'"),
    ("since=1700003600&until=1700000000", "is not after 'since'"),
    ("since=1000d", "a range of at most 400 days"),
    ("limit=0", "'limit' is a whole number from 1 to 100000, not '0'"),
    ("limit=ten", "not 'ten'"),
])
def test_a_wrong_query_gets_a_clear_error(viewer, query, message):
    response = viewer.get(f"/api/v1/usage?{query}")
    assert response.status_code == 400 and message in response.json()["error"]


def test_the_api_needs_login(client):
    assert client.get("/api/v1/usage").status_code == 401


# -- idle allocations now ----------------------------------------------------------------------------------------

def test_ingest_lists_the_idle_allocations_now_with_owner_and_since(redis_client, make_ingest, viewer,  # noqa: F811
                                                                    settings):
    settings.GPULSE_IDLE_MIN_SECONDS = 60  # dana's GPU has been idle 90 s
    ingest = make_ingest()
    now = time.time()
    for second in (-90, -60, -30, 0):
        apply(ingest, node_sample("n1", now + second, [
            (0, [process("dana", "101", cmd="jupyter-lab --port 8888")], None, 80.0, H100),
            (97, [process("alice", "100")], None, 600.0, H100),
            (0, [], None, 60.0, H100),
        ]))
    ingest.emit(now)
    listed = orjson.loads(redis_client.get(Keys().idle_allocations))
    assert [(e["node"], e["gpu"], e["user"], e["job"], e["since"]) for e in listed] == [("n1", 0, "dana", "101",
                                                                                          pytest.approx(now - 90))]
    GpuPrice.objects.create(gpu_model=H100, usd_per_gpu_hour="4.00")
    answer = viewer.get("/api/v1/usage?by=user&since=1h").json()
    assert answer["idle_now"][0]["usd_per_hour"] == 4.0 and answer["idle_now"][0]["idle_s"] >= 89
    assert idle_summary(stage_of(ingest, IdleStage).idle.by_model(now), current_prices()) == {"gpus": 1,
                                                                                             "usd_per_hour": 4.0}

    # Busy again: it leaves the list at the next write.
    apply(ingest, node_sample("n1", now + 30, [(80, [process("dana", "101")], None, 300.0, H100)]))
    ingest.emit(now + 30)
    assert orjson.loads(redis_client.get(Keys().idle_allocations)) == []


def test_a_restarted_ingest_keeps_how_long_a_gpu_has_been_idle(redis_client, make_ingest):  # noqa: F811
    now = time.time()

    def node(second, second_owner):
        return node_sample("n1", now + second, [(0, [process("dana", "101")], None, 80.0, H100),
                                               (0, [process(*second_owner)], None, 80.0, H100),
                                               (0, [process("erin", "103")], None, 80.0, H100)])

    ingest = make_ingest()
    apply(ingest, node(-600, ("bob", "102")))
    ingest.emit(now - 600)
    again = make_ingest()  # the restarted ingest
    again.load_known_nodes()
    sample = node(0, ("carol", "104"))  # GPU 1 changed hands while ingest was away
    sample["gpus"][2]["util"] = 80.0  # GPU 2 busy now
    apply(again, sample)
    again.emit(now)
    listed = {e["gpu"]: (e["user"], e["since"]) for e in orjson.loads(redis_client.get(Keys().idle_allocations))}
    assert listed == {0: ("dana", pytest.approx(now - 600)), 1: ("carol", pytest.approx(now))}
    # GPU 2 was busy in the node's first sample: idle again later, it starts afresh.
    apply(again, node(30, ("carol", "104")))
    again.emit(now + 30)
    assert {e["gpu"]: e["since"] for e in orjson.loads(redis_client.get(Keys().idle_allocations))}[2] == \
        pytest.approx(now + 30)


@pytest.mark.parametrize("stored", [b"{not json", b'{"node": "n1"}', b'[1, "x", {"node": "n1", "gpu": "0"}]',
                                    b'[{"node": "n1", "gpu": 0, "since": "NaN", "user": "d", "job": "", "pod": ""}]'])
def test_an_idle_list_in_redis_that_ingest_did_not_write_is_skipped(redis_client, make_ingest, stored):  # noqa: F811
    redis_client.set(Keys().idle_allocations, stored)
    ingest = make_ingest()
    ingest.load_known_nodes()
    now = time.time()
    apply(ingest, node_sample("n1", now, [(0, [process("d", "")], None, 80.0, H100)]))
    ingest.emit(now)
    assert [e["since"] for e in orjson.loads(redis_client.get(Keys().idle_allocations))] == [pytest.approx(now)]


def test_a_down_nodes_gpus_leave_the_idle_list(redis_client, make_ingest):  # noqa: F811
    ingest = make_ingest()
    now = time.time()
    apply(ingest, node_sample("n1", now - 100, [(0, [process("dana", "101")], None, 80.0, H100)]))
    ingest.emit(now - 100)
    assert len(orjson.loads(redis_client.get(Keys().idle_allocations))) == 1
    ingest.emit(now)  # 100 intervals without a sample: down
    assert orjson.loads(redis_client.get(Keys().idle_allocations)) == []


def test_the_idle_kpi_prices_each_model(db):
    GpuPrice.objects.create(gpu_model=A100, usd_per_gpu_hour="1.50")
    figures = idle_summary({A100: 2, H100: 1, "Acme Tensor 9": 1}, current_prices())
    # The admin's A100 price, H100 at its family's default, a model of no known family at GPULSE_PRICE_GPU_HOUR.
    assert figures == {"gpus": 4, "usd_per_hour": pytest.approx(2 * 1.5 + 3.0 + 2.5)}


def test_a_minute_of_usage_lands_in_the_hour_it_belongs_to(make_ingest):  # noqa: F811
    ingest = make_ingest()
    hour = 1_700_002_800.0  # 02:00 on the hour boundary
    assert hour % 3600 == 0
    for ts in (hour - 30, hour + 30):
        apply(ingest, node_sample("n1", ts, [(90, [process("alice", "100")], None, 300.0, H100)], interval=30.0))
    ingest.flush()
    hours = sorted(UsageHour.objects.values_list("hour", "allocated_seconds"))
    assert hours == [(dt.datetime.fromtimestamp(hour - 3600, dt.UTC), 30.0),
                     (dt.datetime.fromtimestamp(hour, dt.UTC), 30.0)]


# -- energy end to end: the real collector and NVML binding against the C stand-in -------------------------------

@pytest.mark.parametrize("unsupported", [["power"], ["energy"]], ids=["from the counter", "from power"])
def test_the_kwh_of_a_collector_against_the_stand_in_match_its_power_within_one_percent(
        redis_client, redis_url, make_ingest, unsupported):  # noqa: F811
    """The stand-in's energy counter advances at the power it reports (612.4 W + i W for GPU i).

    With the power reading unsupported the kWh can only come from the counter's deltas, which cover
    the time from the first sample to the last read of the counter (every second here, every 10 s by
    default); with the counter unsupported, only from power × the seconds each sample counts, which
    cover the time the samples span."""
    interval = 0.2
    collector = subprocess.Popen(
        [sys.executable, "-m", "collectors", "--source", "nvml", "--node-name", "gpu-07", "--interval", str(interval),
         "--redis-url", redis_url, "--probe-interval", "0", "--energy-interval", "1"],
        cwd=ROOT, env=fake_nvml.subprocess_env(fake_nvml.config(gpus=2, unsupported=unsupported)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while redis_client.xlen(Keys().telemetry_stream("gpu-07")) < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        collector.terminate()
        _, errors = collector.communicate(timeout=20)
    samples = [orjson.loads(fields[b"s"]) for _, fields in redis_client.xrange(Keys().telemetry_stream("gpu-07"))]
    taken = [sample["ts"] for sample in samples]
    assert len(taken) >= 40, errors.decode()

    def last_read(index: int) -> int:
        """The sample that carried GPU ``index``'s last read of the counter: the ones after it repeat it."""
        return max((i for i in range(1, len(samples)) if samples[i]["gpus"][index]["energy"]
                    != samples[i - 1]["gpus"][index]["energy"]), default=0)

    ingest = make_ingest()
    while ingest.read(block_ms=10):
        pass
    ingest.flush()
    for index in (0, 1):
        rows = GpuUsage.objects.filter(node="gpu-07", gpu=index)
        seconds = sum(row.seconds for row in rows)
        # Counted as the stream saw the samples (issue 31): the time they span and the first one's interval,
        # never more than they claim; a late sample (a skipped tick) may leave up to an interval uncounted.
        span = interval + taken[-1] - taken[0]
        assert span - interval - 0.01 <= seconds <= min(span, interval * len(taken)) + 0.01
        covered = taken[last_read(index)] - taken[0] if unsupported == ["power"] else seconds
        kwh = sum(row.energy_j for row in rows) / 3.6e6
        assert kwh == pytest.approx((612.4 + index) * covered / 3.6e6, rel=0.01)
