"""The database side of usage accounting: add each part to its row (rollup_store's staged upsert).

The per-GPU rows are loaded once; the hour and cluster sums are GROUP BYs over
them in the same transaction, so the three tables agree and no Python loop
runs over the rows a second time.
"""

from django.db import connection

from dashboard.live.models import USAGE_SUMS, ClusterUsage, GpuUsage, UsageHour
from dashboard.live.rollup_store import listed, staged, upsert

GPU_KEY = ("node", "gpu", "minute", "user", "job", "pod")
GPU_COLUMNS = (*GPU_KEY, "model", *USAGE_SUMS)
HOUR_KEY = ("hour", "node", "model", "user", "job", "pod")


def _adding(table: str, _vendor: str) -> str:
    q = connection.ops.quote_name
    return ", ".join(f"{q(name)} = {table}.{q(name)} + excluded.{q(name)}" for name in USAGE_SUMS)


def _adding_with_model(table: str, vendor: str) -> str:
    q = connection.ops.quote_name
    return f"{q('model')} = excluded.{q('model')}, " + _adding(table, vendor)


def _hour_of_minute() -> str:
    """SQL for the start of the hour of the part's ``minute``, stored as the ORM stores a datetime."""
    if connection.vendor == "postgresql":
        return "date_trunc('hour', minute)"  # Django's connections keep their time zone at UTC
    return "strftime('%Y-%m-%d %H:00:00', minute)"  # SQLite: the naive UTC text Django writes


def merge_usage(rows: list[tuple]) -> int:
    """Merge GpuUsage rows (RollupAccumulator.usage_rows) into the three tables; call inside a transaction."""
    if not rows:
        return 0
    sums = ", ".join(f"SUM({connection.ops.quote_name(name)})" for name in USAGE_SUMS)
    with staged(GpuUsage, GPU_COLUMNS, rows, time_column=2) as part:
        upsert(GpuUsage, GPU_COLUMNS, GPU_KEY, _adding_with_model,
               f"SELECT {listed(GPU_COLUMNS)} FROM {part} WHERE true")
        upsert(UsageHour, (*HOUR_KEY, *USAGE_SUMS), HOUR_KEY, _adding,
               f"SELECT {_hour_of_minute()}, {listed(HOUR_KEY[1:])}, {sums} FROM {part} WHERE true "
               f"GROUP BY {_hour_of_minute()}, {listed(HOUR_KEY[1:])}")
        upsert(ClusterUsage, ("minute", *USAGE_SUMS), ("minute",), _adding,
               f"SELECT minute, {sums} FROM {part} WHERE true GROUP BY minute")
    return len(rows)
