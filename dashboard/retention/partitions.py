"""PostgreSQL: the rollup tables partitioned by time, so expiry drops a partition instead of deleting its rows.

Minute rollups (GpuRollup) are partitioned by day, hourly ones (GpuRollupHour) by month: native declarative
range partitioning, set up by migration retention 0002 on PostgreSQL only (SQLite deletes in batches, as
prune.py does everywhere). Each retention pass creates the partitions of the spans ahead, so ingest never
writes a row no partition covers, and drops each partition wholly older than what is kept; prune.py's batch
deletes then take what is left: the rows of the partly expired partition and of the default partition.

The default partition takes a row older than the first partition (a backfill, or rows from before the
migration that are past the first partition it made), so no rollup write ever fails for want of one.
Creating or dropping a partition takes a lock on the table ingest writes: each is done a few days ahead or
after the fact, once per pass, under a short lock_timeout, so a long transaction delays the next pass and
never stalls ingest; and under an advisory lock, so two workers' passes do not both try.
"""

import datetime as dt
import itertools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connection, models, transaction

from dashboard.live.models import GpuRollup, GpuRollupHour
from dashboard.retention.prune import minutes_expire_before

log = logging.getLogger(__name__)

DAY = "day"
MONTH = "month"
# Spans created ahead of the current one: a pass that fails for a day or two (the database away) still
# finds ingest's rows covered.
SPANS_AHEAD = 3
# The spans before the current one that the migration makes partitions for, where they have rows.
BACKFILL_SPANS = 45
# How long a partition's DDL may wait for the table's lock before it gives up until the next pass.
LOCK_TIMEOUT = "2s"
# pg_try_advisory_xact_lock's key for the partition upkeep: one worker at a time.
ADVISORY_LOCK = 0x67707573  # "gpus"


@dataclass(frozen=True)
class Partitioned:
    model: type[models.Model]
    column: str  # the time column it is partitioned by
    span: str  # DAY or MONTH
    name: str  # what it is, for the counts a pass reports
    setting: str  # days kept; 0: kept for ever
    expire_before: Callable[[dt.datetime], dt.datetime | None]  # a retention cutoff -> rows before it may go

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    def start(self, at: dt.datetime) -> dt.datetime:
        """The start of the span ``at`` is in (UTC)."""
        at = at.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return at.replace(day=1) if self.span == MONTH else at

    def after(self, start: dt.datetime) -> dt.datetime:
        """The start of the span after the one starting at ``start``."""
        if self.span == DAY:
            return start + dt.timedelta(days=1)
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)

    def before(self, start: dt.datetime) -> dt.datetime:
        """The start of the span before the one starting at ``start``."""
        if self.span == DAY:
            return start - dt.timedelta(days=1)
        return start.replace(year=start.year - (start.month == 1), month=(start.month - 2) % 12 + 1)

    def partition(self, start: dt.datetime) -> str:
        return f"{self.table}_p{start:%Y%m%d}"

    def default(self) -> str:
        return f"{self.table}_default"


PARTITIONED = (
    Partitioned(GpuRollup, "minute", DAY, "minute rollup partitions", "GPULSE_RETAIN_MINUTES_DAYS",
                minutes_expire_before),
    Partitioned(GpuRollupHour, "hour", MONTH, "hourly rollup partitions", "GPULSE_RETAIN_HOURS_DAYS",
                lambda cutoff: cutoff),
)


def is_partitioned(table: str) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [table])
        return cursor.fetchone() is not None


def partition_starts(spec: Partitioned) -> list[dt.datetime]:
    """The starts of the spec's table's span partitions, oldest first (the default one is not a span)."""
    named = re.compile(rf"{re.escape(spec.table)}_p(\d{{8}})")
    with connection.cursor() as cursor:
        cursor.execute("SELECT child.relname FROM pg_inherits JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
                       "WHERE pg_inherits.inhparent = to_regclass(%s)", [spec.table])
        names = [row[0] for row in cursor.fetchall()]
    return sorted(dt.datetime.strptime(match[1], "%Y%m%d").replace(tzinfo=dt.UTC)
                  for name in names if (match := named.fullmatch(name)))


def spans_ahead(spec: Partitioned, now: dt.datetime) -> list[dt.datetime]:
    """The starts of the span ``now`` is in and of the SPANS_AHEAD after it."""
    starts = [spec.start(now)]
    for _ in range(SPANS_AHEAD):
        starts.append(spec.after(starts[-1]))
    return starts


def create_partition_sql(spec: Partitioned, start: dt.datetime) -> str:
    # Bounds are datetimes this module made, not input: written into the DDL, which takes no parameters.
    return (f'CREATE TABLE IF NOT EXISTS "{spec.partition(start)}" PARTITION OF "{spec.table}" '
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{spec.after(start).isoformat()}')")


def _ddl(statement: str, what: str) -> bool:
    """Run one DDL statement in a transaction of its own under the lock timeout; False, logged, where it failed."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(statement)
        return True
    except DatabaseError as exc:
        log.warning("retention: could not %s (%s); the next pass tries again", what, str(exc).strip())
        return False


def _expire_before(spec: Partitioned, now: dt.datetime) -> dt.datetime | None:
    days = getattr(settings, spec.setting)
    return spec.expire_before(now - dt.timedelta(days=days)) if days else None


def _upkeep(spec: Partitioned, now: dt.datetime) -> dict[str, int]:
    """The table's DDL up to its first failure: each wait for the lock holds ingest's writes queued behind
    it, so a table that is held gets one wait a pass, not one for every partition."""
    starts = partition_starts(spec)
    expire_before = _expire_before(spec, now)
    to_drop = list(itertools.takewhile(
        lambda start: expire_before is not None and spec.after(start) <= expire_before, starts))
    counts = {f"{spec.name} created": 0, f"{spec.name} dropped": 0}
    work = [(f"{spec.name} created", create_partition_sql(spec, ahead), f"create {spec.partition(ahead)}")
            for ahead in spans_ahead(spec, now) if ahead not in starts]
    work += [(f"{spec.name} dropped", f'DROP TABLE IF EXISTS "{spec.partition(start)}"',
              f"drop {spec.partition(start)}") for start in to_drop]
    for counted, statement, what in work:
        if not _ddl(statement, what):
            break
        counts[counted] += 1
    return {key: count for key, count in counts.items() if count}


def upkeep(now: dt.datetime) -> dict[str, int]:
    """Create the partitions ahead of ``now`` and drop those wholly past their retention; return how many of
    each, where any. Nothing on SQLite, or while another worker's pass does it."""
    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK])
        if not cursor.fetchone()[0]:
            return {}
    try:
        done = {}
        for spec in PARTITIONED:
            if is_partitioned(spec.table):
                done.update(_upkeep(spec, now))
        return done
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK])


def partition_existing_table(cursor, spec: Partitioned, now: dt.datetime) -> None:
    """Make the spec's plain table one partitioned by its time column, keeping its rows, ids, constraints and
    indexes under their names (migrations refer to them): migration retention 0002, PostgreSQL only.

    A partitioned table's primary key must hold the partition column, so it becomes (id, column); ids still
    come from one sequence, so ``id`` stays unique as Django expects. The spans of the last BACKFILL_SPANS
    with rows get partitions; older rows go to the default partition, which prune.py empties in batches.
    """
    table, column, old = spec.table, spec.column, f"{spec.table}_unpartitioned"
    cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = to_regclass(%s) AND contype = 'u'", [table])
    uniques = cursor.fetchall()
    cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
                   "(SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s))", [table, table])
    indexes = cursor.fetchall()
    cursor.execute(f'SELECT min("{column}") FROM "{table}"')
    oldest = cursor.fetchone()[0]
    cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    cursor.execute(f'ALTER TABLE "{old}" DROP CONSTRAINT "{table}_pkey"')
    for name, _ in uniques:
        cursor.execute(f'ALTER TABLE "{old}" DROP CONSTRAINT "{name}"')
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    cursor.execute(f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                   f'PARTITION BY RANGE ("{column}")')
    cursor.execute(f'ALTER TABLE "{table}" ADD PRIMARY KEY (id, "{column}")')
    for name, definition in uniques:
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
    for _, definition in indexes:
        cursor.execute(definition)  # "CREATE INDEX <name> ON <table> ...": the new table has the old one's name
    cursor.execute(f'CREATE TABLE "{spec.default()}" PARTITION OF "{table}" DEFAULT')
    ahead = spans_ahead(spec, now)
    first = ahead[0]
    for _ in range(BACKFILL_SPANS):
        if oldest is None or first <= spec.start(oldest):
            break
        first = spec.before(first)
    while first < ahead[0]:
        cursor.execute(create_partition_sql(spec, first))
        first = spec.after(first)
    for start in ahead:
        cursor.execute(create_partition_sql(spec, start))
    cursor.execute(f'INSERT INTO "{table}" SELECT * FROM "{old}"')
    cursor.execute(f'DROP TABLE "{old}"')  # and its identity sequence
    sequence = f"{table}_id_seq"
    cursor.execute(f'CREATE SEQUENCE "{sequence}" OWNED BY "{table}".id')
    cursor.execute(f"ALTER TABLE \"{table}\" ALTER COLUMN id SET DEFAULT nextval('\"{sequence}\"')")
    cursor.execute(f"SELECT setval('\"{sequence}\"', COALESCE(max(id), 0) + 1, false) FROM \"{table}\"")
