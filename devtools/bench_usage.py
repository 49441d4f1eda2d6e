"""Cost of usage accounting: ingest's extra CPU at 8,000 GPUs, and a 30-day usage query.

``ingest``: 1,000 nodes of 8 GPUs at 1 Hz, shaped like the simulated fleet
(most GPUs in whole-node jobs, some shared, some idle-allocated, some free);
with --mig-nodes N, the first N nodes' GPUs in MIG mode instead, each split
3g + 2g + 1g + 1g, three of the four instances running a job of their own.
Each simulated second does what ingest does with every sample: the rollups'
fold, the live idle list, every --flush seconds the database write, and every
--usage-flush seconds the usage's with it; once with the usage accounting and
once with it off (GPULSE_USAGE_ACCOUNTING's switch), in the same process and
database. Printed: CPU ms per simulated second for both, and the difference,
which is what accounting adds (10 ms = 1 % of a core).

Without DATABASE_URL, a new SQLite file in a temporary folder.

``query``: generated UsageHour and ClusterUsage rows for --days days of
--nodes nodes (about 1.2 owner rows per node and hour, 144,000 jobs in 30 days), then the usage API's
queries (by user, by job, by node, the allocation chart) over the whole range,
median of --repeat runs. Use PostgreSQL: the database must exist and is
migrated and emptied of usage rows first.

    .venv/bin/python -m devtools.bench_usage ingest [--nodes 1000] [--seconds 60] [--mig-nodes 0] [--json]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpulse_bench \\
        .venv/bin/python -m devtools.bench_usage query [--days 30] [--nodes 1000] [--json]
"""

import argparse
import datetime as dt
import gc
import json
import os
import random
import statistics
import tempfile
import time

import django

H100 = "NVIDIA H100 80GB HBM3"
PAGE_ROWS = 1000  # the API's default: the costliest thousand groups
USERS = [f"user{i:02d}" for i in range(40)]


def _gpu(index: int, util: float, owner: tuple[str, str] | None, energy: float) -> dict:
    processes = [] if owner is None else [
        {"pid": 1000 + index, "name": "python", "user": owner[0], "mem_used": 6e10, "job": owner[1], "step": "0",
         "cmd": "python train.py --config llama.yaml"}]
    return {"index": index, "uuid": f"GPU-{index}", "name": H100, "util": util, "mem_used": 6e10,
            "mem_total": 8.5e10, "temp": 60, "power": 500.0, "energy": energy, "processes": processes}


# A MIG GPU's instances: (GPU instance id, profile, SM activity), the last one free.
MIG_LAYOUT = ((1, "3g.40gb", 0.7), (5, "2g.20gb", 0.02), (13, "1g.10gb", 0.4), (14, "1g.10gb", 0.0))


def _mig_gpu(node: int, index: int, energy: float) -> dict:
    instances = []
    for k, (gpu_instance, profile, sm_active) in enumerate(MIG_LAYOUT):
        owner = None if k == len(MIG_LAYOUT) - 1 else (USERS[(node + k) % 40], str(70000 + node * 8 + k))
        instances.append({"gpu_instance": gpu_instance, "compute_instance": 0, "profile": profile,
                          "uuid": f"MIG-{node}-{index}-{gpu_instance}", "mem_used": 5e9, "mem_total": 1e10,
                          "sm_active": sm_active, "processes": _gpu(index, 0.0, owner, energy)["processes"]})
    return {**_gpu(index, 0.0, None, energy), "util": None, "mig_enabled": True, "mig": instances,
            "processes": [p for instance in instances for p in instance["processes"]]}


def fleet(nodes: int, gpus: int, second: int, mig_nodes: int = 0) -> list[dict]:
    """One second of samples: 70 % of nodes in one whole-node job, 20 % shared by two jobs (one idle), 10 % free;
    the first ``mig_nodes`` nodes' GPUs in MIG mode instead (MIG_LAYOUT)."""
    samples = []
    for n in range(nodes):
        if n < mig_nodes:
            samples.append({"v": 1, "node": f"node-{n:04d}", "ts": 1_800_000_030.0 + second, "interval": 1.0,
                            "gpus": [_mig_gpu(n, g, 1e12 + 500_000.0 * second) for g in range(gpus)]})
            continue
        kind = n % 10
        owners: list[tuple[str, str] | None] = []
        if kind < 7:
            owners += [(USERS[n % 40], str(40000 + n))] * gpus
        elif kind < 9:
            half = gpus // 2
            owners += [(USERS[n % 40], str(50000 + n))] * half + [(USERS[(n + 1) % 40], str(60000 + n))] * half
        else:
            owners += [None] * gpus
        utils = [0.0 if owner is None or (kind >= 7 and g >= gpus // 2) else 95.0 for g, owner in enumerate(owners)]
        samples.append({"v": 1, "node": f"node-{n:04d}", "ts": 1_800_000_030.0 + second, "interval": 1.0,
                        "gpus": [_gpu(g, utils[g], owners[g], 1e12 + 500_000.0 * second) for g in range(gpus)]})
    return samples


def bench_ingest(nodes: int, gpus: int, seconds: int, flush: int, usage_flush: int, mig_nodes: int = 0) -> dict:
    from django.core.management import call_command

    from dashboard.live.models import ClusterUsage, GpuRollup, GpuUsage, UsageHour
    from dashboard.rollups.accumulator import RollupAccumulator
    from dashboard.usage.idle import IdleAllocations

    call_command("migrate", verbosity=0)
    from dashboard.live.frames import gpu_row
    from gpulse.keys import INGEST_GROUP, Keys

    batches = [fleet(nodes, gpus, s, mig_nodes) for s in range(seconds)]
    # The frame rows ingest makes of every sample anyway (their allocation flags cost ~60 ns a GPU more).
    rows = [[[gpu_row(gpu) for gpu in sample["gpus"]] for sample in batch] for batch in batches]

    def run(with_usage: bool) -> float:
        for model in (GpuRollup, GpuUsage, UsageHour, ClusterUsage):
            model.objects.all().delete()
        accumulator = RollupAccumulator(Keys().telemetry_stream, INGEST_GROUP, max_rows=10**7, accounting=with_usage)
        accumulator.resume({})
        idle = IdleAllocations()
        started = time.process_time()
        for second, batch in enumerate(batches):
            for sample, frame_rows in zip(batch, rows[second], strict=True):
                if with_usage:  # as ingest does
                    idle.update(sample["node"], sample, sample["ts"], frame_rows)
                accumulator.add(sample)
            accumulator.fold_queued()
            if (second + 1) % flush == 0:
                accumulator.write(usage=(second + 1) % usage_flush < flush)
        accumulator.write()
        return (time.process_time() - started) * 1000 / seconds

    from dashboard.live.ingest import GC_THRESHOLDS

    gc.freeze()  # as ingest runs
    gc.set_threshold(*GC_THRESHOLDS)
    without, with_ = [], []
    for _ in range(3):  # alternate, so a slower moment of the machine does not fall on one side
        without.append(run(False))
        with_.append(run(True))
    base, total = min(without), min(with_)
    return {"nodes": nodes, "gpus": nodes * gpus, "mig_gpus": min(mig_nodes, nodes) * gpus, "seconds": seconds,
            "flush_every_s": flush, "usage_flush_every_s": usage_flush,
            "database": django.db.connection.vendor, "cpu_ms_per_s_without_usage": round(base, 2),
            "cpu_ms_per_s_with_usage": round(total, 2), "usage_adds_ms_per_s": round(total - base, 2)}


def generate_rows(days: int, nodes: int) -> int:
    """UsageHour (about 1.2 rows per node and hour; a node's jobs change every 6 hours) and ClusterUsage
    rows, written by COPY; return the UsageHour rows."""
    from django.db import connection

    from dashboard.live.models import ClusterUsage, UsageHour

    UsageHour.objects.all().delete()
    ClusterUsage.objects.all().delete()
    rng = random.Random(7)
    end = int(time.time()) // 3600 * 3600
    start = end - days * 86400
    rows = 0
    hour_columns = ("hour", "node", "model", "user", "job", "pod", "mig_profile", "samples", "seconds",
                    "allocated_seconds", "busy_seconds", "sm_activity_seconds", "energy_j")
    with connection.cursor() as cursor:
        listed = ", ".join(map(connection.ops.quote_name, hour_columns))  # "user" is a keyword in PostgreSQL
        with cursor.cursor.copy(f"COPY {UsageHour._meta.db_table} ({listed}) FROM STDIN") as copy:
            for hour in range(start, end, 3600):
                at = dt.datetime.fromtimestamp(hour, dt.UTC)
                for n in range(nodes):
                    node = f"node-{n:04d}"
                    shape = (n * 7 + hour // 21600) % 10  # a node's jobs change every 6 hours
                    job = str(40000 + (hour // 21600) * nodes + n)
                    parts = ([(8, USERS[(n + hour // 21600) % 40], job)] if shape < 7 else
                             [(4, USERS[n % 40], job), (4, USERS[(n + 3) % 40], job + "1")] if shape < 9 else
                             [(8, "", "")])
                    for gpus, user, job_id in parts:
                        seconds = gpus * 3600.0
                        allocated = seconds if user else 0.0
                        busy = allocated * rng.uniform(0.5, 1.0)
                        # H100s report SM activity: it judges all their allocated time
                        copy.write_row((at, node, H100, user, job_id, "", "", gpus * 3600, seconds, allocated, busy,
                                        allocated, seconds * 450.0))
                        rows += 1
        with cursor.cursor.copy(f"COPY {ClusterUsage._meta.db_table} (minute, samples, seconds, allocated_seconds, "
                                "busy_seconds, sm_activity_seconds, energy_j) FROM STDIN") as copy:
            gpus = nodes * 8
            for minute in range(start, end, 60):
                copy.write_row((dt.datetime.fromtimestamp(minute, dt.UTC), gpus * 60, gpus * 60.0, gpus * 52.0,
                                gpus * 40.0, gpus * 52.0, gpus * 60 * 450.0))
        cursor.execute(f"ANALYZE {UsageHour._meta.db_table}")
        cursor.execute(f"ANALYZE {ClusterUsage._meta.db_table}")
    return rows


def bench_query(days: int, nodes: int, repeat: int) -> dict:
    from django.core.management import call_command
    from django.db import connection

    from dashboard.usage.prices import current_prices
    from dashboard.usage.report import allocation_series, usage_table

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    rows = generate_rows(days, nodes)
    generated_s = time.perf_counter() - started
    until = dt.datetime.now(dt.UTC)
    since = until - dt.timedelta(days=days)
    prices = current_prices()
    timings = {}
    for name, query in (
        ("by_user", lambda: usage_table("user", since, until, prices, limit=PAGE_ROWS)),
        ("by_job", lambda: usage_table("job", since, until, prices, limit=PAGE_ROWS)),
        ("by_node", lambda: usage_table("node", since, until, prices, limit=PAGE_ROWS)),
        ("by_job_all", lambda: usage_table("job", since, until, prices)),
        ("chart", lambda: allocation_series(since, until)),
    ):
        query()  # warm the cache, as a page in use has it
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            query()
            runs.append((time.perf_counter() - t) * 1000)
        timings[name] = {"median_ms": round(statistics.median(runs), 1), "max_ms": round(max(runs), 1)}
    return {"database": connection.vendor, "days": days, "nodes": nodes, "gpus": nodes * 8, "usage_hour_rows": rows,
            "generated_s": round(generated_s, 1), "queries": timings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    ingest = sub.add_parser("ingest")
    ingest.add_argument("--nodes", type=int, default=1000)
    ingest.add_argument("--gpus-per-node", type=int, default=8)
    ingest.add_argument("--seconds", type=int, default=60)
    ingest.add_argument("--flush", type=int, default=5, help="seconds between database writes (ingest's default)")
    ingest.add_argument("--usage-flush", type=int, default=60, help="seconds between writes of the usage (ditto)")
    ingest.add_argument("--mig-nodes", type=int, default=0, help="nodes whose GPUs are in MIG mode (MIG_LAYOUT)")
    query = sub.add_parser("query")
    query.add_argument("--days", type=int, default=30)
    query.add_argument("--nodes", type=int, default=1000)
    query.add_argument("--repeat", type=int, default=5)
    for each in (ingest, query):
        each.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # Never the demo's database: its rows are deleted.
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tempfile.mkdtemp(prefix='gpulse-bench-')}/bench.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    if args.what == "ingest":
        result = bench_ingest(args.nodes, args.gpus_per_node, args.seconds, args.flush, args.usage_flush,
                              args.mig_nodes)
    else:
        result = bench_query(args.days, args.nodes, args.repeat)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
