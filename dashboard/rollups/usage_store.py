"""The database side of usage accounting: add each part to its row (rollup_store.merge's upsert)."""

from django.db import connection

from dashboard.live.models import USAGE_SUMS, ClusterUsage, GpuUsage, UsageHour
from dashboard.rollups.rollup_store import merge

GPU_KEY = ("node", "gpu", "minute", "user", "job", "pod", "mig_instance")
HOUR_KEY = ("hour", "node", "model", "user", "job", "pod", "mig_profile")
# GpuUsage's row, as MinuteUsage.rows() makes it.
GPU_COLUMNS = ("node", "gpu", "minute", "user", "job", "pod", "model", *USAGE_SUMS, "mig_instance", "mig_profile")


def _adding(table: str, _vendor: str) -> str:
    q = connection.ops.quote_name
    return ", ".join(f"{q(name)} = {table}.{q(name)} + excluded.{q(name)}" for name in USAGE_SUMS)


def _adding_with_model(table: str, vendor: str) -> str:
    q = connection.ops.quote_name
    return f"{q('model')} = excluded.{q('model')}, {q('mig_profile')} = excluded.{q('mig_profile')}, " + _adding(
        table, vendor)


def merge_usage(gpu_rows: list[tuple], hour_rows: list[tuple], cluster_rows: list[tuple]) -> int:
    """Merge RollupAccumulator.usage_rows() into the three tables; call inside a transaction."""
    merge(GpuUsage, GPU_COLUMNS, GPU_KEY, _adding_with_model, gpu_rows, time_column=2)
    merge(UsageHour, (*HOUR_KEY, *USAGE_SUMS), HOUR_KEY, _adding, hour_rows, time_column=0)
    merge(ClusterUsage, ("minute", *USAGE_SUMS), ("minute",), _adding, cluster_rows, time_column=0)
    return len(gpu_rows)
