"""History at its retention on PostgreSQL: table sizes, node history query latency and the retention pass's time.

Fills a scratch database on the PostgreSQL server DATABASE_URL names (created, migrated, dropped at the
end unless --keep) with what the defaults keep for a fleet: minute rollups for GPULSE_RETAIN_MINUTES_DAYS
plus 2 days (so a pass has whole days to drop), hourly rollups for GPULSE_RETAIN_HOURS_DAYS, every GPU a
row each minute and hour, in the partitions the retention passes would have made over that time. Then:

- the rollup tables' size (every partition, indexes included) and per GPU, projected to --project GPUs;
- `rollup_history()` (what the node page and API call) for one 8-GPU node over 1 h to 365 days, the
  median and the slowest of --repeat runs after one warm-up;
- one retention pass in the steady state (every hour computed but the last): downsampling, partitions,
  prune, each timed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m devtools.bench_history \\
        [--nodes 25] [--gpus-per-node 8] [--repeat 20] [--project 8000] [--json]
"""

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from urllib.parse import urlsplit

import dj_database_url
import psycopg
from dj_database_url import DBConfig

BENCH_DATABASE = "gpulse_bench_history"
READINGS = {"util": ("40", "50", "60"), "temp": ("40", "50", "60"), "power": ("300", "350", "400"),
            "mem_used": ("4e10", "4e10", "4e10")}  # min, mean, max
RANGES = {"1 h": dt.timedelta(hours=1), "1 d": dt.timedelta(days=1), "7 d": dt.timedelta(days=7),
          "30 d": dt.timedelta(days=30), "90 d": dt.timedelta(days=90), "365 d": dt.timedelta(days=365)}


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--project", type=int, default=8000, help="GPUs to project the sizes to")
    parser.add_argument("--keep", action="store_true", help="leave the scratch database for a look")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def admin_connection(server: DBConfig) -> psycopg.Connection:
    return psycopg.connect(host=server["HOST"] or "127.0.0.1", port=server["PORT"] or 5432, user=server["USER"],
                           password=server["PASSWORD"] or None, dbname=server["NAME"], autocommit=True)


def rollup_readings(metrics) -> dict[str, float]:
    """A full minute's (or hour's, of 60 samples) rollup columns for ``metrics``: READINGS, else activity ratios."""
    values: dict[str, float] = {"samples": 60}
    for metric in metrics:
        low, mean, high = map(float, READINGS.get(metric, ("0.4", "0.5", "0.6")))
        values |= {f"{metric}_min": low, f"{metric}_mean": mean, f"{metric}_max": high,
                   f"{metric}_sum": mean * 60, f"{metric}_count": 60}
    return values


def fill(table: str, column: str, step: str, first: dt.datetime, last: dt.datetime, args, metrics) -> int:
    """Rows for every GPU at each ``step`` from first to last, in one INSERT ... SELECT; return how many."""
    from django.db import connection

    values = {name: repr(value) for name, value in rollup_readings(metrics).items()}  # numbers this module made
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" (node, gpu, "{column}", {", ".join(values)}) '
            f"SELECT 'node-' || lpad(n::text, 5, '0'), g, t, {', '.join(values.values())} "
            f"FROM generate_series(0, %s) n, generate_series(0, %s) g, generate_series(%s, %s, %s::interval) t",
            [args.nodes - 1, args.gpus_per_node - 1, first, last, step])
        return cursor.rowcount


def table_bytes(table: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s)", [table])
        return int(cursor.fetchone()[0] or 0)


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def run(args) -> dict:
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    from dashboard.live.models import ROLLUP_METRICS
    from dashboard.nodes.history import rollup_history
    from dashboard.retention.downsample import HOUR, WATERMARK, downsample, floor_hour
    from dashboard.retention.models import Watermark
    from dashboard.retention.partitions import PARTITIONED, create_partition_sql, upkeep
    from dashboard.retention.prune import prune

    call_command("migrate", verbosity=0)
    now = dt.datetime.now(dt.UTC)
    minutes, hours = PARTITIONED
    minute_days = settings.GPULSE_RETAIN_MINUTES_DAYS + 2
    kept_days = {minutes: minute_days, hours: settings.GPULSE_RETAIN_HOURS_DAYS}
    with connection.cursor() as cursor:  # the partitions the passes of those days made
        for spec, days in kept_days.items():
            start = spec.start(now - dt.timedelta(days=days))
            while start <= now:
                cursor.execute(create_partition_sql(spec, start))
                start = spec.after(start)
    this_minute = now.replace(second=0, microsecond=0)
    last_hour = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    filled = {
        "minute rows": fill(minutes.table, "minute", "1 minute", this_minute - dt.timedelta(days=minute_days),
                            this_minute, args, ROLLUP_METRICS),
        "hour rows": fill(hours.table, "hour", "1 hour", last_hour - dt.timedelta(days=kept_days[hours]), last_hour,
                          args, ROLLUP_METRICS),
    }
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    gpus = args.nodes * args.gpus_per_node
    sizes = {spec.table: table_bytes(spec.table) for spec in PARTITIONED}
    queries = {}
    for name, span in RANGES.items():
        rollup_history("node-00000", now - span, now)  # warm-up
        seconds = [timed(lambda span=span: rollup_history("node-00000", now - span, now))[0]
                   for _ in range(args.repeat)]
        queries[name] = {"median_ms": round(statistics.median(seconds) * 1000, 1),
                         "max_ms": round(max(seconds) * 1000, 1)}
    # A pass in the steady state: the ones before it computed every hour but the last.
    Watermark.objects.create(name=WATERMARK, until=floor_hour(now) - HOUR)
    downsample_s, _ = timed(lambda: downsample(now))
    upkeep_s, upkept = timed(lambda: upkeep(now))
    prune_s, pruned = timed(lambda: prune(now))
    sizes_after = {spec.table: table_bytes(spec.table) for spec in PARTITIONED}
    return {
        "gpus": gpus, **filled,
        "bytes": sizes, "bytes_per_gpu": {table: size // gpus for table, size in sizes.items()},
        f"projected_gib_at_{args.project}_gpus": {table: round(size / gpus * args.project / 2**30, 1)
                                                  for table, size in sizes.items()},
        "history_query": queries,
        "retention_pass": {"downsample_s": round(downsample_s, 2), "partitions_s": round(upkeep_s, 3),
                           "partitions": upkept, "prune_s": round(prune_s, 2), "pruned": pruned,
                           "bytes_after": sizes_after},
    }


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    server = dj_database_url.parse(os.environ.get("DATABASE_URL", ""))
    if not server.get("ENGINE", "").endswith("postgresql"):
        print("bench_history needs DATABASE_URL=postgres://... (a server it may create a database on)",
              file=sys.stderr)
        return 2
    with admin_connection(server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
    os.environ["DATABASE_URL"] = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{BENCH_DATABASE}").geturl()
    try:
        result = run(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            with admin_connection(server) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DATABASE}" WITH (FORCE)')
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    sys.exit(main())
