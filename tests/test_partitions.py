"""PostgreSQL: the rollup tables partitioned by time (dashboard/retention/partitions.py). Expiry drops a whole
partition, the retention pass creates the ones ahead, and the migration turns tables with rows into
partitioned ones keeping every row. On the PostgreSQL server of the suite's PostgreSQL run; skipped on SQLite.
"""

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.db import IntegrityError, connection, transaction

from dashboard.live.models import GpuRollup, GpuRollupHour
from dashboard.retention.downsample import WATERMARK
from dashboard.retention.models import Watermark
from dashboard.retention.partitions import ADVISORY_LOCK, PARTITIONED, partition_starts, spans_ahead, upkeep
from dashboard.retention.runner import run_retention
from devtools.stack import ROOT
from tests.test_ingest_durability import ON_POSTGRES, SUITE_DATABASE, postgres_connect, postgres_url

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="partitions are PostgreSQL's; runs in the suite's run "
                                "with DATABASE_URL=postgres://...")

MINUTES, HOURS = PARTITIONED
DAY = dt.timedelta(days=1)


def children(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT child.relname FROM pg_inherits JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
                       "WHERE pg_inherits.inhparent = to_regclass(%s)", [table])
        return {row[0] for row in cursor.fetchall()}


def minute(at: dt.datetime, node: str = "gpu-01", gpu: int = 0) -> GpuRollup:
    return GpuRollup.objects.create(node=node, gpu=gpu, minute=at, samples=60, util_sum=600.0, util_count=60,
                                    util_min=5.0, util_mean=10.0, util_max=20.0)


@pytest.mark.django_db
def test_the_migrated_rollup_tables_are_partitioned_with_the_spans_ahead_and_a_default():
    now = dt.datetime.now(dt.UTC)
    for spec in PARTITIONED:
        names = children(spec.table)
        assert spec.default() in names
        assert {spec.partition(start) for start in spans_ahead(spec, now - DAY)[1:]} <= names, (spec.table, names)


@pytest.mark.django_db
def test_a_pass_creates_the_partitions_ahead_and_drops_the_minutes_wholly_past_retention(settings):
    settings.GPULSE_RETAIN_MINUTES_DAYS = 14
    now = dt.datetime.now(dt.UTC)
    then = now - 20 * DAY
    assert upkeep(then)["minute rollup partitions created"] == 4  # as the pass made them 20 days ago
    old = [minute(then.replace(hour=1)), minute(then.replace(hour=2), gpu=1)]
    late_backfill = minute(now - 40 * DAY)  # no partition that old: the default one holds it
    kept = minute(now - DAY)
    Watermark.objects.create(name=WATERMARK, until=now - 2 * DAY)

    done = run_retention(now)

    assert done["minute rollup partitions dropped"] >= 1
    assert MINUTES.partition(MINUTES.start(then)) not in children(MINUTES.table)
    assert MINUTES.start(now + 3 * DAY) in partition_starts(MINUTES)
    assert not GpuRollup.objects.filter(pk__in=[row.pk for row in old]).exists()
    assert not GpuRollup.objects.filter(pk=late_backfill.pk).exists()  # deleted in batches from the default
    assert GpuRollup.objects.filter(pk=kept.pk).exists()
    # New rows still go in, each with an id of its own, and one row per GPU-minute still holds.
    assert minute(now).pk > kept.pk
    with pytest.raises(IntegrityError, match="duplicate key"), transaction.atomic():
        minute(now)


@pytest.mark.django_db
def test_a_minute_partition_goes_only_once_its_hours_are_computed(settings):
    settings.GPULSE_RETAIN_MINUTES_DAYS = 14
    now = dt.datetime.now(dt.UTC)
    then = (now - 20 * DAY).replace(minute=0, second=0, microsecond=0)
    upkeep(then)
    row = minute(then)

    assert "minute rollup partitions dropped" not in upkeep(now)  # no hour computed yet
    assert GpuRollup.objects.filter(pk=row.pk).exists()

    assert run_retention(now)["minute rollup partitions dropped"] >= 1  # it downsamples first
    assert not GpuRollup.objects.filter(pk=row.pk).exists()
    assert GpuRollupHour.objects.get(node="gpu-01", gpu=0, hour=then).samples == 60


@pytest.mark.django_db
def test_hourly_partitions_are_months_and_go_after_their_retention(settings):
    settings.GPULSE_RETAIN_HOURS_DAYS = 400
    now = dt.datetime.now(dt.UTC)
    then = now - 450 * DAY
    upkeep(then)
    hour = GpuRollupHour.objects.create(node="gpu-01", gpu=0, hour=then.replace(minute=0, second=0, microsecond=0),
                                        samples=3600)
    assert HOURS.partition(HOURS.start(then)) == f"live_gpurolluphour_p{then:%Y%m}01"

    assert upkeep(now).get("hourly rollup partitions dropped", 0) >= 1

    assert not GpuRollupHour.objects.filter(pk=hour.pk).exists()


@pytest.mark.django_db
def test_a_partition_held_by_a_long_transaction_is_left_to_the_next_pass(caplog):
    # A long report holding the table: the DDL gives up after LOCK_TIMEOUT rather than queue ingest's writes
    # behind its own lock for as long as the report runs.
    ahead = dt.datetime.now(dt.UTC) + 30 * DAY  # spans no pass has made yet
    with postgres_connect(connection.settings_dict["NAME"]) as report:
        report.autocommit = False
        report.execute(f'LOCK TABLE "{MINUTES.table}" IN ACCESS SHARE MODE')
        done = upkeep(ahead)
        report.rollback()
    assert "minute rollup partitions created" not in done
    assert MINUTES.start(ahead) not in partition_starts(MINUTES)
    assert f"could not create {MINUTES.partition(MINUTES.start(ahead))}" in caplog.text
    assert "lock timeout" in caplog.text
    assert caplog.text.count("could not") == 1  # one wait for the held table, not one for each partition
    assert upkeep(ahead)["minute rollup partitions created"] == 4  # the next pass, the report gone


@pytest.mark.django_db
def test_a_pass_leaves_the_partitions_to_another_workers_pass():
    ahead = dt.datetime.now(dt.UTC) + 30 * DAY
    with postgres_connect(connection.settings_dict["NAME"]) as other_worker:
        other_worker.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK])
        assert upkeep(ahead) == {}
    assert MINUTES.start(ahead) not in partition_starts(MINUTES)


@pytest.mark.database  # a database of its own on the suite's server
def test_the_migration_keeps_every_row_id_and_index_of_a_table_that_has_rows():
    name = "gpulse_partitioning_migration"
    with postgres_connect(SUITE_DATABASE["NAME"]) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    env = {"DATABASE_URL": postgres_url(name)}

    def migrate(*target: str) -> None:
        done = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", *target], cwd=ROOT,
                              env={**os.environ, **env}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    try:
        migrate("live")  # every rollup column, and not yet retention 0002
        migrate("retention", "0001")
        now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
        with postgres_connect(name) as database:
            sums = [row[0] for row in database.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'live_gpurollup' "
                "AND (column_name LIKE '%%_sum' OR column_name LIKE '%%_count')").fetchall()]
            insert = (f"INSERT INTO live_gpurollup (node, gpu, minute, samples, {', '.join(sums)}) "
                      f"VALUES (%s, 0, %s, 60, {', '.join('0' for _ in sums)}) RETURNING id")
            for days in (0, 3, 60):  # today, a span the migration backfills, one older than its backfill
                database.execute(insert, ["gpu-01", now - days * DAY])
            before = database.execute("SELECT id, minute FROM live_gpurollup ORDER BY id").fetchall()
            indexes = {row[0] for row in database.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'live_gpurollup'").fetchall()}

        migrate()

        with postgres_connect(name) as database:
            assert database.execute("SELECT id, minute FROM live_gpurollup ORDER BY id").fetchall() == before
            assert database.execute("SELECT count(*) FROM live_gpurollup_default").fetchone()[0] == 1
            assert database.execute(
                "SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'live_gpurollup'::regclass").fetchone()
            after = {row[0] for row in database.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'live_gpurollup'").fetchall()}
            assert after == indexes  # the primary key's name and the unique one's too
            new_id = database.execute(insert, ["gpu-02", now]).fetchone()[0]
            assert new_id > max(row[0] for row in before)
    finally:
        with postgres_connect(SUITE_DATABASE["NAME"]) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
