"""The database side of rollups: merge partial minutes by upsert, keep the streams' checkpoints.

``merge`` is the upsert itself, for any table whose parts add up (usage_store's too).

A partial minute is merged into its row with one INSERT ... ON CONFLICT DO
UPDATE that adds samples, sums and counts and keeps the lower minimum and the
higher maximum, so the same minute may arrive in any number of parts. Django's
bulk_create(update_conflicts=True) can only overwrite a column, not add to it.
SQLite (3.24+) and PostgreSQL both take this statement; they differ only in
the two-argument minimum (MIN/MAX in SQLite, LEAST/GREATEST in PostgreSQL).
"""

from collections.abc import Callable, Sequence

from django.db import connection
from django.db.models import Model

from dashboard.live.models import ROLLUP_METRICS, GpuRollup, RollupCheckpoint

STATS = ("min", "mean", "max", "sum", "count")
COLUMNS = ("node", "gpu", "minute", "samples", *(f"{m}_{s}" for m in ROLLUP_METRICS for s in STATS))


def _merge_assignments(table: str, vendor: str) -> str:
    lower, higher = ("LEAST", "GREATEST") if vendor == "postgresql" else ("MIN", "MAX")
    q = connection.ops.quote_name

    def old(column: str) -> str:
        return f"{table}.{q(column)}"

    def new(column: str) -> str:
        return f"excluded.{q(column)}"

    sets = [f"{q('samples')} = {old('samples')} + {new('samples')}"]
    for metric in ROLLUP_METRICS:
        low, high, total, count, mean = (f"{metric}_{s}" for s in ("min", "max", "sum", "count", "mean"))
        # Either side may be NULL (no reading in that part); MIN(x, NULL) is NULL in SQLite.
        sets.append(f"{q(low)} = COALESCE({lower}({old(low)}, {new(low)}), {old(low)}, {new(low)})")
        sets.append(f"{q(high)} = COALESCE({higher}({old(high)}, {new(high)}), {old(high)}, {new(high)})")
        sets.append(f"{q(total)} = {old(total)} + {new(total)}")
        sets.append(f"{q(count)} = {old(count)} + {new(count)}")
        both = f"({old(count)} + {new(count)})"
        sets.append(f"{q(mean)} = CASE WHEN {both} > 0 THEN ({old(total)} + {new(total)}) / {both} END")
    return ", ".join(sets)


def merge_rollups(rows: Sequence[tuple]) -> None:
    """Merge rows (values in COLUMNS order, the minute an aware datetime) into GpuRollup;
    call inside a transaction."""
    merge(GpuRollup, COLUMNS, ("node", "gpu", "minute"), _merge_assignments, rows, time_column=2)


def merge(model: type[Model], columns: Sequence[str], key: Sequence[str], assignments: Callable[[str, str], str],
          rows: Sequence[tuple], time_column: int) -> None:
    """INSERT rows (values in ``columns`` order) into the model's table; a row whose ``key`` exists
    is merged by ``assignments(table, vendor)``, the SET clause. ``time_column``: the index of
    the one aware datetime in a row. Call inside a transaction.

    The rows go into a temporary table shaped like the model's (``<table>_part``) by PostgreSQL's
    binary COPY or SQLite's executemany, and one INSERT ... SELECT merges them from there: binding
    8,000 rows x 24 values as parameters of VALUES lists spent a second in Python on PostgreSQL,
    and on SQLite more time in Django's placeholder rewriting of the long statements than in the
    upsert; text COPY formats every number as digits, six times the Python of binary.
    """
    if not rows:
        return
    q = connection.ops.quote_name
    table, part = q(model._meta.db_table), q(model._meta.db_table + "_part")
    listed = ", ".join(map(q, columns))
    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        # The table lasts as long as the connection (made again after a reconnection); its rows,
        # only until merged, even where no commit follows (a test's transaction). Should a
        # statement fail, the transaction's rollback takes the loaded rows away too.
        cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {part} AS SELECT {listed} FROM {table} WHERE false")
        if postgres:  # COPY takes the aware datetimes as they are
            cursor.execute(f"SELECT {listed} FROM {part} WHERE false")
            types = [column.type_code for column in cursor.description]
            with cursor.cursor.copy(f"COPY {part} ({listed}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
        else:  # as the ORM stores them: SQLite keeps naive UTC text; the rows share a few times
            adapt = connection.ops.adapt_datetimefield_value
            adapted = {value: adapt(value) for value in {row[time_column] for row in rows}}
            before, after = time_column, time_column + 1
            cursor.executemany(f"INSERT INTO {part} ({listed}) VALUES ({', '.join(['%s'] * len(columns))})",
                               [(*row[:before], adapted[row[before]], *row[after:]) for row in rows])
        # WHERE true: without it SQLite reads the ON CONFLICT after a bare FROM as a join's ON.
        cursor.execute(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM {part} WHERE true "
                       f"ON CONFLICT ({', '.join(map(q, key))}) DO UPDATE SET {assignments(table, connection.vendor)}")
        # TRUNCATE on PostgreSQL: autovacuum never visits temporary tables, so deleted rows would pile up.
        cursor.execute(f"TRUNCATE {part}" if postgres else f"DELETE FROM {part}")


def load_checkpoints(prefix: str, suffix: str) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """Per node, the newest entry ids (ms, seq) already folded into the rollups and into the usage: from the
    checkpoints named ``<prefix><node><suffix>`` (a node's stream key and the consumer group)."""
    found = RollupCheckpoint.objects.filter(stream__startswith=prefix, stream__endswith=suffix).values_list(
        "stream", "entry_ms", "entry_seq", "usage_entry_ms", "usage_entry_seq")
    return {stream[len(prefix):len(stream) - len(suffix)]: ((ms, seq), (usage_ms, usage_seq))
            for stream, ms, seq, usage_ms, usage_seq in found if len(stream) > len(prefix) + len(suffix)}


def save_checkpoints(checkpoints: dict[str, tuple[tuple[int, int], tuple[int, int]]]) -> None:
    """Write each named checkpoint (rollups' entry, usage's entry) in one statement."""
    if not checkpoints:
        return
    RollupCheckpoint.objects.bulk_create(
        [RollupCheckpoint(stream=stream, entry_ms=entry[0], entry_seq=entry[1], usage_entry_ms=usage[0],
                          usage_entry_seq=usage[1]) for stream, (entry, usage) in checkpoints.items()],
        update_conflicts=True, unique_fields=["stream"],
        update_fields=["entry_ms", "entry_seq", "usage_entry_ms", "usage_entry_seq"],
    )
