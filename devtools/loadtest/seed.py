"""`python -m devtools.loadtest.seed`: minute rows past their retention, for the load test's retention passes.

The tables prune() deletes most of grow by a row per GPU and minute: the minute rollups and the GPU
usage minutes. For --nodes x --gpus-per-node GPUs (nodes named seeded-<hex>-NNNNN: apart from the run's own, and from
the rows an earlier run left in a database given with --database-url),
each gets a row per minute for --hours before its table's retention cutoff, a backlog the first pass
downsamples into hourly rows and deletes, and for --ahead seconds after it, rows that expire while the
load test runs, so every later pass has the minutes that expired since the one before to delete, as in
production. Prints the rows written and how many had expired, as JSON.

Not with bulk_create: it prepares every field of every row, about 5,000 rows a second, minutes for an hour
of 8,000 GPUs. The rows differ only in node, GPU and minute, so the model's fields prepare one row's values
once, and each batch of BATCH_ROWS goes in one executemany of the same INSERT, in a transaction.
"""

import argparse
import datetime as dt
import os
import secrets
import sys
from collections.abc import Iterator
from itertools import islice

import django
import orjson
from django.db import connection, transaction
from django.db.models import Model

from collectors.arguments import positive_float, positive_int
from devtools.bench_history import rollup_readings
from devtools.bench_usage import H100

BATCH_ROWS = 5000
MINUTE = dt.timedelta(minutes=1)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.loadtest.seed", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=positive_int, required=True)
    parser.add_argument("--gpus-per-node", type=positive_int, required=True)
    parser.add_argument("--hours", type=positive_float, required=True, help="hours of rows past the cutoff")
    parser.add_argument("--ahead", type=positive_float, required=True,
                        help="seconds of rows after the cutoff, which expire while the load test runs")
    return parser.parse_args(argv)


def minutes(cutoff: dt.datetime, hours: float, ahead: float) -> list[dt.datetime]:
    """Every minute from ``hours`` before ``cutoff`` to ``ahead`` seconds after it."""
    first = cutoff.replace(second=0, microsecond=0) - dt.timedelta(hours=hours)
    count = int((cutoff + dt.timedelta(seconds=ahead) - first) / MINUTE)
    return [first + k * MINUTE for k in range(count)]


def insert(model: type[Model], values: dict, rows: Iterator[tuple[str, int, dt.datetime]]) -> None:
    """Insert a row of ``model`` per (node, gpu, minute) of ``rows``, every other column from ``values``."""
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    template = model(node="", gpu=0, minute=dt.datetime.now(dt.UTC), **values)
    prepared = [field.get_db_prep_save(getattr(template, field.attname), connection) for field in fields]
    names = [field.attname for field in fields]
    node, gpu, minute = names.index("node"), names.index("gpu"), names.index("minute")
    minute_field = fields[minute]
    sql = (f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} "
           f"({', '.join(connection.ops.quote_name(field.column) for field in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))})")

    def row(node_name: str, index: int, at: object) -> list:
        values = prepared.copy()
        values[node], values[gpu], values[minute] = node_name, index, at
        return values

    last: tuple[dt.datetime | None, object] = (None, None)
    while batch := list(islice(rows, BATCH_ROWS)):
        prepared_rows = []
        for node_name, index, at in batch:
            if at != last[0]:  # a minute's rows come together: its value prepared once
                last = (at, minute_field.get_db_prep_save(at, connection))
            prepared_rows.append(row(node_name, index, last[1]))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, prepared_rows)


def seed(nodes: int, gpus: int, hours: float, ahead: float) -> dict:
    """Write the rows; return per kind (prune.py's names) the rows written and those already expired."""
    from django.conf import settings
    from django.utils import timezone

    from dashboard.live.models import ROLLUP_METRICS, GpuRollup, GpuUsage

    readings = rollup_readings(ROLLUP_METRICS)
    usage = {"samples": 60, "seconds": 60.0, "allocated_seconds": 60.0, "busy_seconds": 50.0,
             "sm_activity_seconds": 60.0, "energy_j": 60 * 450.0, "model": H100, "user": "seeded", "job": "1"}
    run = secrets.token_hex(3)
    names = [f"seeded-{run}-{n:05d}" for n in range(nodes)]
    tables: tuple[tuple[str, str, type[Model], dict], ...] = (
        ("minute rollups", "GPULSE_RETAIN_MINUTES_DAYS", GpuRollup, readings),
        ("GPU usage minutes", "GPULSE_RETAIN_USAGE_MINUTES_DAYS", GpuUsage, usage),
    )
    now = timezone.now()
    done: dict[str, dict[str, int]] = {"rows": {}, "expired": {}}
    for kind, setting, model, values in tables:
        days = getattr(settings, setting)
        if not days:
            raise SystemExit(f"seed: {setting} is 0 (kept for ever): the retention pass would prune no {kind}")
        cutoff = now - dt.timedelta(days=days)
        span = minutes(cutoff, hours, ahead)
        insert(model, values, ((node, gpu, minute) for minute in span for node in names for gpu in range(gpus)))
        done["rows"][kind] = len(span) * nodes * gpus
        done["expired"][kind] = sum(minute < cutoff for minute in span) * nodes * gpus
    return done


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    print(orjson.dumps(seed(args.nodes, args.gpus_per_node, args.hours, args.ahead)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
