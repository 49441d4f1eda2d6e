"""History retention (dashboard/retention/): hourly rollups equal to their minutes, rows past each retention
deleted and younger ones kept, and the node API reading hourly rows for long ranges. On the real database."""

import datetime as dt
import threading
import time
import uuid

import pytest
from django.db import connections

from dashboard.accounts.models import AuditEvent
from dashboard.alerts.models import Alert, DeliveryAttempt, Notification, Rule, Transition, WebhookEndpoint, fingerprint
from dashboard.health.models import HealthChange
from dashboard.live.models import ROLLUP_METRICS, ClusterUsage, GpuRollup, GpuRollupHour, GpuUsage, UsageHour
from dashboard.reliability.models import Exposure, Incident
from dashboard.retention.downsample import WATERMARK, downsample, downsampled_until
from dashboard.retention.models import Watermark
from dashboard.retention.prune import BATCH_ROWS, delete_in_batches, prune
from dashboard.retention.runner import run_retention
from tests.test_api import cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 5, 4, 13, 30, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
STATS = ("min", "mean", "max", "sum", "count")
USAGE = {"samples": 60, "seconds": 60.0, "allocated_seconds": 30.0, "busy_seconds": 20.0, "energy_j": 9000.0}


def minute(node: str, gpu: int, at: dt.datetime, util: float | None, temp: float = 60.0) -> GpuRollup:
    """A minute whose util ranges around ``util`` (None: no util reading) and whose power and memory are constant."""
    samples = 60
    row = GpuRollup(node=node, gpu=gpu, minute=at, samples=samples)
    readings = {"util": util, "temp": temp, "power": 300.0, "mem_used": 4e9}
    for metric, value in readings.items():
        if value is not None:
            low, high = value - 1, value + 2
            setattr(row, f"{metric}_min", low)
            setattr(row, f"{metric}_max", high)
            setattr(row, f"{metric}_sum", value * samples)
            setattr(row, f"{metric}_count", samples)
            setattr(row, f"{metric}_mean", value)
    row.save()
    return row


def merged(minutes: list[GpuRollup]) -> dict:
    """What the hour of these minutes must hold, computed here from the rows themselves."""
    expected: dict = {"samples": sum(m.samples for m in minutes)}
    for metric in ROLLUP_METRICS:
        lows = [getattr(m, f"{metric}_min") for m in minutes if getattr(m, f"{metric}_min") is not None]
        highs = [getattr(m, f"{metric}_max") for m in minutes if getattr(m, f"{metric}_max") is not None]
        total = sum(getattr(m, f"{metric}_sum") for m in minutes)
        count = sum(getattr(m, f"{metric}_count") for m in minutes)
        expected |= {f"{metric}_min": min(lows, default=None), f"{metric}_max": max(highs, default=None),
                     f"{metric}_sum": pytest.approx(total), f"{metric}_count": count,
                     f"{metric}_mean": pytest.approx(total / count) if count else None}
    return expected


def hour_row(node: str, gpu: int, hour: dt.datetime) -> dict:
    return GpuRollupHour.objects.filter(node=node, gpu=gpu, hour=hour).values(
        "samples", *(f"{m}_{s}" for m in ROLLUP_METRICS for s in STATS)).get()


def everything() -> list:
    """Every row of the tables a pass writes, as values, in a stable order."""
    return [list(GpuRollupHour.objects.order_by("id").values()), list(GpuRollup.objects.order_by("id").values()),
            list(Watermark.objects.values())]


def test_hourly_rows_equal_the_minutes_they_came_from_late_minutes_included():
    first_hour = dt.datetime(2026, 5, 4, 11, tzinfo=dt.UTC)
    gpu0 = [minute("n1", 0, first_hour + i * MINUTE, util=10.0 * i) for i in range(0, 60, 7)]
    gpu1 = [minute("n1", 1, first_hour + i * MINUTE, util=None if i % 2 else 50.0 + i) for i in range(60)]
    next_hour = [minute("n1", 0, first_hour + HOUR + i * MINUTE, util=99.0) for i in range(3)]
    unlit = [minute("n2", 0, first_hour + i * MINUTE, util=None) for i in range(5)]  # no util reading at all

    downsample(NOW)
    assert hour_row("n1", 0, first_hour) == merged(gpu0)
    assert hour_row("n1", 1, first_hour) == merged(gpu1)
    assert hour_row("n1", 0, first_hour + HOUR) == merged(next_hour)
    assert hour_row("n2", 0, first_hour) == merged(unlit) and merged(unlit)["util_mean"] is None
    assert GpuRollupHour.objects.count() == 4

    # A node's buffered samples land after the first pass: the next pass takes them in.
    late = minute("n1", 0, first_hour + 59 * MINUTE, util=100.0, temp=95.0)
    downsample(NOW + 5 * MINUTE)
    assert hour_row("n1", 0, first_hour) == merged([*gpu0, late])
    assert hour_row("n1", 0, first_hour)["temp_max"] == 97.0


def test_a_pass_writes_again_only_the_hours_whose_minutes_changed():
    first_hour = dt.datetime(2026, 5, 4, 9, tzinfo=dt.UTC)
    for h in range(3):
        for i in range(0, 60, 10):
            minute("n1", 0, first_hour + h * HOUR + i * MINUTE, util=float(i))
    assert downsample(NOW) == 3
    assert downsample(NOW + MINUTE) == 0  # within the recompute window, but nothing new

    late = minute("n1", 1, first_hour + HOUR + 5 * MINUTE, util=70.0)  # another GPU's buffered minute
    assert downsample(NOW + 2 * MINUTE) == 2  # its hour, both GPUs' rows, and no other
    assert hour_row("n1", 1, first_hour + HOUR) == merged([late])


def test_an_hour_is_computed_only_two_minutes_after_it_ended():
    hour = dt.datetime(2026, 5, 4, 12, tzinfo=dt.UTC)
    minute("n1", 0, hour + 59 * MINUTE, util=5.0)
    downsample(hour + HOUR + MINUTE)
    assert not GpuRollupHour.objects.exists() and downsampled_until() == hour
    downsample(hour + HOUR + 2 * MINUTE)
    assert GpuRollupHour.objects.filter(hour=hour).exists() and downsampled_until() == hour + HOUR


def test_a_second_pass_changes_nothing():
    for i in range(90):
        minute("n1", i % 3, NOW - 3 * HOUR + i * MINUTE, util=float(i))
    minute("n1", 0, NOW - dt.timedelta(days=20), util=1.0)  # past the minutes' retention, downsampled first
    first = run_retention(NOW)
    assert first["minute rollups"] == 1 and first["hourly rows written"] > 0
    after_one = everything()
    second = run_retention(NOW)
    assert "minute rollups" not in second  # nothing more to prune
    assert everything() == after_one


def test_the_first_pass_starts_at_the_oldest_minute_and_later_ones_catch_up_from_the_watermark():
    old = dt.datetime(2026, 4, 28, 3, tzinfo=dt.UTC)  # six days back: far before the last 6 hours
    minute("n1", 0, old + 10 * MINUTE, util=7.0)
    downsample(NOW)
    assert GpuRollupHour.objects.filter(hour=old).exists()
    assert downsampled_until() == dt.datetime(2026, 5, 4, 13, tzinfo=dt.UTC)

    # Workers stopped for two days: the hours since the watermark are computed, however old.
    stopped = NOW + dt.timedelta(days=2)
    minute("n1", 0, NOW + HOUR, util=8.0)
    downsample(stopped)
    assert GpuRollupHour.objects.filter(hour=dt.datetime(2026, 5, 4, 14, tzinfo=dt.UTC)).exists()


def test_a_minute_not_yet_downsampled_is_not_pruned():
    old = (NOW - dt.timedelta(days=20)).replace(minute=0)
    minute("n1", 0, old, util=3.0)
    prune(NOW)  # no hour computed yet: no watermark
    assert GpuRollup.objects.count() == 1
    Watermark.objects.create(name=WATERMARK, until=old - HOUR)  # a pass that stopped before that hour
    prune(NOW)
    assert GpuRollup.objects.count() == 1

    run_retention(NOW)
    assert not GpuRollup.objects.exists()
    assert GpuRollupHour.objects.get(hour=old).util_mean == 3.0


# Per kind of row: its setting's default (days) and a row of it at a given time.
def _alert(number: int = 0) -> Alert:
    rule = Rule.objects.get_or_create(name="hot", metric="gpu.temp", threshold=85)[0]
    return Alert.objects.create(fingerprint=fingerprint(rule.id, "n1", number), rule=rule, node="n1", gpu=number,
                                status="inactive", status_since=NOW)


def _transition(at: dt.datetime, alert: Alert | None = None, notify: bool = False, processed: bool = True,
                notification: Notification | None = None) -> Transition:
    return Transition.objects.create(alert=alert or _alert(Transition.objects.count()), old="inactive", new="firing",
                                     reason="x", created=at, notify=notify, processed=at if processed else None,
                                     notification=notification)


def _superseded_transition(at: dt.datetime) -> Transition:
    """A transition with a later one of its alert: not the alert's latest, which is kept whatever its age."""
    older = _transition(at)
    _transition(at + MINUTE, alert=older.alert)
    return older


def _attempt(at: dt.datetime, notification: Notification | None = None) -> DeliveryAttempt:
    endpoint = WebhookEndpoint.objects.get_or_create(name="pager", url="https://pager.example/")[0]
    attempt = DeliveryAttempt.objects.create(endpoint=endpoint, notification=notification, event_id=uuid.uuid4(),
                                             kind="test", attempt=1, outcome="ok", duration_ms=1.0)
    DeliveryAttempt.objects.filter(id=attempt.id).update(created=at)  # auto_now_add
    return attempt


def _audit(at: dt.datetime) -> AuditEvent:
    event = AuditEvent.objects.create(action="rule.update", target="rule 1")
    AuditEvent.objects.filter(id=event.id).update(created=at)
    return event


def _notification(at: dt.datetime) -> Notification:
    return Notification.objects.create(node=f"n{Notification.objects.count()}", created=at, updated=at, processed=at)


KINDS = {
    "minute rollups": (14, lambda at: minute("n1", 0, at, util=1.0)),
    "hourly rollups": (400, lambda at: GpuRollupHour.objects.create(node="n1", gpu=0, hour=at, samples=1)),
    "GPU usage minutes": (14, lambda at: GpuUsage.objects.create(node="n1", gpu=0, minute=at, **USAGE)),
    "usage hours": (400, lambda at: UsageHour.objects.create(hour=at, node="n1", **USAGE)),
    "cluster usage minutes": (400, lambda at: ClusterUsage.objects.create(minute=at, **USAGE)),
    "alert transitions": (180, _superseded_transition),
    "delivery attempts": (30, _attempt),
    "notification groups": (180, _notification),
    "audit events": (400, _audit),
    "health changes": (90, lambda at: HealthChange.objects.create(node="n1", at=at, old="healthy", new="failing")),
    "incidents": (730, lambda at: Incident.objects.create(node="n1", component="node_down", start=at - HOUR, end=at)),
    "node-hours watched": (730, lambda at: Exposure.objects.create(start=at - HOUR, end=at, node_hours=4.0)),
}


@pytest.mark.parametrize("kind", KINDS)
def test_rows_older_than_their_retention_go_and_younger_ones_stay(kind):
    days, make = KINDS[kind]
    cutoff = NOW - dt.timedelta(days=days)
    old, young = make(cutoff - HOUR), make(cutoff + HOUR)
    model = type(old)
    assert run_retention(NOW)[kind] == 1
    assert not model.objects.filter(id=old.id).exists()
    assert model.objects.filter(id=young.id).exists()


def test_a_retention_of_0_keeps_rows_for_ever(settings):
    settings.GPULSE_RETAIN_AUDIT_DAYS = 0
    ancient = _audit(NOW - dt.timedelta(days=5000))
    assert "audit events" not in run_retention(NOW)
    assert AuditEvent.objects.filter(id=ancient.id).exists()


def test_what_the_alert_pages_show_is_kept_however_old():
    old = NOW - dt.timedelta(days=365)
    alert = _alert()
    group = _notification(old)
    notified = _transition(old, alert=alert, notify=True, notification=group)  # the alert's latest notifying one
    between = _transition(old + MINUTE, alert=alert)
    latest = _transition(old + 2 * MINUTE, alert=alert)  # the alert's latest: its reason on the pages
    waiting = _transition(old, notify=True, processed=False)  # not dispatched yet
    sent = _attempt(old, notification=group)  # the delivery the latest notice shows
    stray = _attempt(old)
    unused = _notification(old)
    open_incident = Incident.objects.create(node="n1", component="node_down", start=old)
    imported = Incident.objects.create(node="n1", component="gpu", start=old - HOUR, end=old,
                                       source=Incident.IMPORTED)

    run_retention(NOW)
    assert set(Transition.objects.values_list("id", flat=True)) == {notified.id, latest.id, waiting.id}
    assert not Transition.objects.filter(id=between.id).exists()
    assert list(DeliveryAttempt.objects.values_list("id", flat=True)) == [sent.id] and stray.id != sent.id
    assert list(Notification.objects.values_list("id", flat=True)) == [group.id] and unused.id != group.id
    assert set(Incident.objects.values_list("id", flat=True)) == {open_incident.id, imported.id}


def test_deletes_go_in_batches_of_at_most_5000_rows(django_assert_max_num_queries):
    GpuRollupHour.objects.bulk_create(
        [GpuRollupHour(node="n1", gpu=i % 8, hour=NOW - dt.timedelta(days=500, hours=i // 8), samples=1)
         for i in range(BATCH_ROWS + 10)])
    with django_assert_max_num_queries(8) as queries:  # two batches: each a read of ids, then one DELETE
        assert delete_in_batches(GpuRollupHour.objects.filter(hour__lt=NOW)) == BATCH_ROWS + 10
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 2


@pytest.mark.django_db(transaction=True)
def test_two_workers_passing_at_once_leave_the_same_rows_as_one():
    hour = NOW.replace(minute=0) - 2 * HOUR
    rows = [minute("n1", i % 4, hour + (i // 4) * MINUTE, util=float(i)) for i in range(200)]  # 50 minutes
    minute("n1", 0, NOW - dt.timedelta(days=30), util=1.0)
    failures = []

    def worker():
        try:
            run_retention(NOW)
        except Exception as exc:  # collected, so the test fails with it
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for gpu in range(4):
        assert hour_row("n1", gpu, hour) == merged([row for row in rows if row.gpu == gpu])
    assert GpuRollup.objects.filter(minute__lt=NOW - dt.timedelta(days=14)).count() == 0
    assert downsampled_until() == NOW.replace(minute=0)


def test_a_year_of_hours_reads_as_daily_buckets_merged_from_them(client, viewer_user, cluster):  # noqa: F811
    client.force_login(viewer_user)
    day = dt.datetime.fromtimestamp(time.time() // 86400 * 86400, dt.UTC) - dt.timedelta(days=100)
    for h in (1, 5, 23):
        GpuRollupHour.objects.create(node="n1", gpu=0, hour=day + h * HOUR, samples=3600, util_min=h,
                                     util_mean=10.0 * h, util_max=50 + h, util_sum=36000.0 * h, util_count=3600)
    GpuRollupHour.objects.create(node="n1", gpu=0, hour=day + 30 * HOUR, samples=60, util_count=0)  # no util

    history = client.get("/api/v1/nodes/n1?since=365d").json()["history"]

    assert history["resolution"] == 86400  # 365 points: 6-hour buckets would be 1,460, over a chart's MAX_POINTS
    assert history["gpus"][0]["ts"] == [day.timestamp(), (day + dt.timedelta(days=1)).timestamp()]
    assert history["gpus"][0]["util"] == [[1, pytest.approx(290 / 3), 73], [None, None, None]]


def test_the_node_api_reads_hourly_rows_for_long_ranges(client, viewer_user, cluster):  # noqa: F811
    client.force_login(viewer_user)
    now = time.time()
    hour = dt.datetime.fromtimestamp(now // 3600 * 3600, dt.UTC) - dt.timedelta(days=40)
    GpuRollupHour.objects.create(node="n1", gpu=0, hour=hour, samples=3600, util_min=1, util_mean=40, util_max=90,
                                util_sum=144000, util_count=3600)
    recent = dt.datetime.fromtimestamp(now // 60 * 60 - 120, dt.UTC)
    GpuRollup.objects.create(node="n1", gpu=0, minute=recent, samples=60, util_min=10, util_mean=20, util_max=30,
                            util_sum=1200, util_count=60)

    history = client.get("/api/v1/nodes/n1?since=90d").json()["history"]
    # 2,160 hours: more than a chart's MAX_POINTS, so 6-hour buckets of the hourly rows.
    assert history["rollups"] == "hourly" and history["resolution"] == 6 * 3600
    assert history["gpus"][0]["ts"] == [hour.timestamp() // 21600 * 21600]
    assert history["gpus"][0]["util"] == [[1, 40, 90]]
    # A range of 7 days or less that starts within the minutes kept: minute rows, in 15-minute buckets.
    week = client.get("/api/v1/nodes/n1?since=7d").json()["history"]
    assert week["rollups"] == "minute" and week["resolution"] == 900
    assert week["gpus"][0]["ts"] == [recent.timestamp() // 900 * 900]
    hours = client.get("/api/v1/nodes/n1?since=6h").json()["history"]
    assert hours["resolution"] == 60 and hours["gpus"][0]["ts"] == [recent.timestamp()]
    day = client.get("/api/v1/nodes/n1?since=1d").json()["history"]
    assert day["resolution"] == 300 and day["gpus"][0]["ts"] == [recent.timestamp() // 300 * 300]
    # Two days, but starting before the minutes kept (14 days): hourly rows.
    start = hour - dt.timedelta(days=1)
    old = client.get(f"/api/v1/nodes/n1?since={start.timestamp()}&until={(start + dt.timedelta(days=2)).timestamp()}")
    assert old.json()["history"]["resolution"] == 3600 and old.json()["history"]["gpus"][0]["ts"] == [hour.timestamp()]
