"""Busy by SM activity (issue 36): where a GPU reports SM activity, busy means SM activity at or above
GPULSE_BUSY_SM_ACTIVITY (10 %), else utilization at or above GPULSE_BUSY_UTIL (5 %), everywhere "busy" is
used: the frames' FLAG_IDLE, the usage accounting (each row says which measure judged it: busy_by), /usage/,
its API and /metrics. And what the activity readings add on the way: frames carry SM activity, the minute
and hourly rollups carry SM, tensor and DRAM activity, a GPU without them null, never 0."""

import datetime as dt
import time

import pytest

from dashboard.live.frames import FIELDS, FLAG_ALLOCATED, FLAG_IDLE, gpu_row
from dashboard.live.models import GpuRollup, GpuRollupHour, GpuUsage, UsageHour
from dashboard.metrics import gpu_families
from dashboard.nodes.history import rollup_history
from dashboard.retention.downsample import write_hour
from dashboard.usage.prices import current_prices
from dashboard.usage.report import usage_table
from gpulse.usage import BY_SM_ACTIVITY, BY_UTILIZATION, busy_by, is_busy, is_idle_allocated
from tests.samples import gpu, sample
from tests.test_ingest import apply, frames, make_ingest  # noqa: F401 (fixtures)
from tests.test_usage_accounting import accumulator, fold, process
from tests.test_usage_pages import Tables

pytestmark = pytest.mark.django_db

# (utilization %, SM activity ratio or None, busy at the default thresholds, the measure that judged it)
READINGS = [
    (100, 0.05, False, BY_SM_ACTIVITY),  # the stalled data loader: kernels run all the time, the SMs wait
    (100, 0.099, False, BY_SM_ACTIVITY),
    (100, 0.10, True, BY_SM_ACTIVITY),  # at the threshold: busy
    (3, 0.60, True, BY_SM_ACTIVITY),  # SM activity judges, not utilization
    (0, 0.0, False, BY_SM_ACTIVITY),
    (None, 0.30, True, BY_SM_ACTIVITY),
    (50, None, True, BY_UTILIZATION),  # no GPM (before Hopper): utilization, as before
    (5, None, True, BY_UTILIZATION),
    (4.9, None, False, BY_UTILIZATION),
    (None, None, None, None),  # neither: no verdict
]


def held(util, sm_active, index=0, user="alice", job="100") -> dict:
    """An allocated GPU's reading (a process holds it)."""
    return gpu(index, util=util, sm_active=sm_active, processes=[process(user, job)])


@pytest.mark.parametrize(("util", "sm_active", "busy", "_measure"), READINGS)
def test_busy_is_sm_activity_where_reported_else_utilization(util, sm_active, busy, _measure):
    reading = held(util, sm_active)
    assert is_busy(reading) is busy
    assert is_idle_allocated(reading) is (None if busy is None else not busy)
    free = gpu(0, util=util, sm_active=sm_active, processes=[])
    assert is_idle_allocated(free) is False  # nobody holds it: not an idle allocation


def test_the_thresholds_are_the_settings_values():
    stalled = held(100, 0.15)
    assert is_busy(stalled) is True
    assert is_busy(stalled, busy_sm_activity=20.0) is False
    assert is_busy(held(30, None), busy_util=40.0) is False
    assert is_busy(held(30, 0.5), busy_util=40.0) is True  # utilization's threshold does not judge it


@pytest.mark.parametrize(("util", "sm_active", "busy", "_measure"), READINGS)
def test_the_frames_idle_flag_and_the_accounting_follow_the_same_rule(util, sm_active, busy, _measure):
    """frames.gpu_row and the accumulator inline gpulse.usage's rule: held in step here."""
    reading = held(util, sm_active)
    row = gpu_row(reading)
    assert row[FIELDS.index("flags")] & FLAG_ALLOCATED
    assert bool(row[FIELDS.index("flags")] & FLAG_IDLE) == (is_idle_allocated(reading) is True)
    s = sample("n1", gpus=0, ts=1_700_000_040.0)
    s["gpus"] = [reading]
    (usage,) = fold(accumulator(), s)
    samples, seconds, allocated, busy_seconds, activity_seconds = usage[7:12]
    assert (samples, seconds, allocated) == (1, 1.0, 1.0)
    assert busy_seconds == (1.0 if busy else 0.0)
    assert activity_seconds == (1.0 if sm_active is not None else 0.0)


def test_a_row_is_busy_by_the_measure_that_judged_most_of_its_allocated_time():
    assert busy_by(60.0, 60.0) == BY_SM_ACTIVITY
    assert busy_by(60.0, 30.0) == BY_SM_ACTIVITY
    assert busy_by(60.0, 29.0) == BY_UTILIZATION
    assert busy_by(60.0, 0.0) == BY_UTILIZATION
    assert busy_by(0.0, 0.0) is None  # never allocated: nothing was judged


def test_frames_carry_sm_activity_in_percent_and_null_where_not_reported(make_ingest, frames):  # noqa: F811
    ingest = make_ingest()
    s = sample("n1", gpus=0)
    s["gpus"] = [held(100, 0.05, 0), held(90, 0.8361, 1), held(60, None, 2), gpu(3, util=0, sm_active=0.0)]
    apply(ingest, s)
    ingest.emit(time.time())
    frame = frames[-1]
    assert frame["fields"] == list(FIELDS) and "sm_active" in FIELDS
    rows = [dict(zip(frame["fields"], row, strict=True)) for row in frame["nodes"]["n1"]["gpus"]]
    assert [row["sm_active"] for row in rows] == [5, 84, None, 0]  # null where unknown, 0 only where read as 0
    assert [bool(row["flags"] & FLAG_IDLE) for row in rows] == [True, False, False, False]


def test_usage_rows_say_busy_by_and_the_stalled_loader_counts_idle_on_the_usage_page(make_ingest, viewer):  # noqa: F811
    """Three jobs for an hour: alice's stalled loader (100 % utilization, 5 % SM activity), bob's training
    (95 %, 85 %) and carol's on a GPU without GPM (90 %, no SM activity)."""
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 2) * 3600
    for step in range(120):
        s = sample("n1", gpus=0, ts=start + 30 * step, interval=30.0)
        s["gpus"] = [held(100, 0.05, 0, "alice", "100"), held(95, 0.85, 1, "bob", "101"),
                     held(90, None, 2, "carol", "102")]
        apply(ingest, s)
    ingest.flush()

    minute = GpuUsage.objects.filter(user="alice").first()
    assert minute.busy_seconds == 0 and minute.sm_activity_seconds == minute.allocated_seconds > 0
    assert UsageHour.objects.get(user="carol").sm_activity_seconds == 0
    since, until = dt.datetime.fromtimestamp(start, dt.UTC), dt.datetime.fromtimestamp(start + 3600, dt.UTC)
    table = {row["user"]: row for row in usage_table("user", since, until, current_prices())["rows"]}
    assert {user: (row["busy_pct"], row["busy_by"]) for user, row in table.items()} == {
        "alice": (0.0, BY_SM_ACTIVITY), "bob": (100.0, BY_SM_ACTIVITY), "carol": (100.0, BY_UTILIZATION)}
    assert table["alice"]["idle_gpu_hours"] == pytest.approx(1.0)  # by utilization it was an hour busy

    answer = viewer.get(f"/api/v1/usage?by=user&since={start}&until={start + 3600}").json()
    assert {row["user"]: row["busy_by"] for row in answer["rows"]} == {
        "alice": "sm_activity", "bob": "sm_activity", "carol": "utilization"}
    page = viewer.get(f"/usage/?since={start}&until={start + 3600}")
    rows = {row[0]: row for row in Tables(page.content.decode()).tables["usage-user"]["body"]}
    # User, GPU-hours, Busy %, Busy by, Idle GPU-hours, …
    assert rows["alice"][1:5] == ["1.0", "0.0", "SM activity", "1.0"]
    assert rows["carol"][1:5] == ["1.0", "100.0", "utilization", "0.0"]
    csv = viewer.get(f"/usage/user.csv?since={start}&until={start + 3600}").content.decode().splitlines()
    assert csv[0].split(",")[:4] == ["user", "gpu_hours", "busy_pct", "busy_by"]


def test_rollups_carry_activity_and_a_gpu_without_it_stays_null(make_ingest):  # noqa: F811
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 2) * 3600
    for second in range(120):
        s = sample("n1", gpus=0, ts=start + second)
        # GPU 0 reports SM activity every other second only: the mean is of the readings, nulls not counted as 0.
        s["gpus"] = [gpu(0, sm_active=0.4 if second % 2 else None, tensor_active=0.2, dram_active=0.1),
                     gpu(1, sm_active=None, tensor_active=None, dram_active=None)]
        apply(ingest, s)
    ingest.flush()
    with_gpm = GpuRollup.objects.filter(gpu=0).order_by("minute").first()
    assert (with_gpm.sm_active_count, with_gpm.sm_active_mean, with_gpm.sm_active_min) == (30, pytest.approx(0.4), 0.4)
    assert (with_gpm.tensor_active_mean, with_gpm.dram_active_max) == (pytest.approx(0.2), pytest.approx(0.1))
    without = GpuRollup.objects.filter(gpu=1).first()
    assert (without.sm_active_count, without.sm_active_mean, without.sm_active_min, without.sm_active_max) == (
        0, None, None, None)

    # The node page's history: per GPU and minute, (min, mean, max) of each, null where not reported.
    since, until = (dt.datetime.fromtimestamp(ts, dt.UTC) for ts in (start, start + 120))
    history = rollup_history("n1", since, until)
    by_gpu = {series["gpu"]: series for series in history["gpus"]}
    assert by_gpu[0]["sm_active"][0] == [0.4, pytest.approx(0.4), 0.4]
    assert by_gpu[1]["sm_active"] == by_gpu[1]["dram_active"] == [[None, None, None]] * 2

    write_hour(dt.datetime.fromtimestamp(start, dt.UTC))
    hour = {row.gpu: row for row in GpuRollupHour.objects.all()}
    assert (hour[0].sm_active_count, hour[0].sm_active_mean) == (60, pytest.approx(0.4))
    assert (hour[1].sm_active_count, hour[1].sm_active_mean, hour[1].dram_active_max) == (0, None, None)


def test_metrics_busy_follows_sm_activity():
    node = {"node": "n1", "status": "up",
            "gpus": [held(100, 0.05, 0), held(3, 0.5, 1), held(50, None, 2), held(None, None, 3)]}
    families = {family.name: family for family in gpu_families([node], 5.0, 10.0)}
    busy = {int(s.labels["gpu"]): s.value for s in families["gpulse_gpu_busy"].samples}
    assert busy == {0: 0, 1: 1, 2: 1}  # GPU 3: no verdict, no series
    assert "GPULSE_BUSY_SM_ACTIVITY" in families["gpulse_gpu_busy"].documentation
