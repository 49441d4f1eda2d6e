"""`python -m devtools.loadtest.pruner`: the retention pass on a timer, each pass logged, for the load test.

Runs dashboard.retention.runner.run_retention() (downsample, partitions, prune) every --every seconds,
start to start (a pass that overruns is followed at once by the next, never overlapped), from --first-at
until --until (Unix times: the load test's window), then waits to be stopped; a process of its own beside
ingest, as celery beat's task runs in a control worker. It appends a JSON line to --log when a pass starts
({"start": t}) and one when it ends ({"start": t, "end": t, "done": {what: rows}}); read_passes() reads
them back, so a pass still running when the window ends counts too.

    .venv/bin/python -m devtools.loadtest.pruner --every 60 --log passes.jsonl [--first-at T] [--until T]
"""

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from collectors.arguments import positive_float


@dataclass(frozen=True)
class Pass:
    start: float
    end: float | None  # None: still running when the log was read
    done: dict[str, int]


def read_passes(log: Path) -> list[Pass]:
    """The passes the log holds, in order; the last one without its end where it had not ended."""
    passes: list[Pass] = []
    lines = log.read_bytes().splitlines() if log.exists() else []
    for line in lines:
        entry = orjson.loads(line)
        if "end" in entry:
            passes[-1] = Pass(entry["start"], entry["end"], entry["done"])
        else:
            passes.append(Pass(entry["start"], None, {}))
    return passes


def during(passes: list[Pass], until: float) -> Callable[[np.ndarray], np.ndarray]:
    """Sample ts -> whether each was taken while a pass ran (one still running: until ``until``)."""
    starts = np.array([p.start for p in passes], dtype=float)
    ends = np.array([until if p.end is None else p.end for p in passes], dtype=float)

    def taken_in_a_pass(ts: np.ndarray) -> np.ndarray:
        return np.asarray(((ts[:, None] >= starts) & (ts[:, None] < ends)).any(axis=1))

    return taken_in_a_pass


def summary(passes: list[Pass], every: float, seeded: dict) -> dict:
    """The result's "retention": passes run, rows pruned per kind, hourly rows written, partitions created and
    dropped (PostgreSQL), each pass's seconds."""
    ended = [p for p in passes if p.end is not None]
    pruned: dict[str, int] = {}
    partitions: dict[str, int] = {}
    for p in ended:
        for what, count in p.done.items():
            # partitions.py's counts name their partitions; prune.py's name the rows.
            totals = partitions if "partitions" in what else pruned
            if what != "hourly rows written":
                totals[what] = totals.get(what, 0) + count
    return {
        "every_s": every,
        "seeded": seeded,
        "passes": len(ended),
        "unfinished": len(passes) - len(ended),
        "pruned": pruned,
        "hourly_rows_written": sum(p.done.get("hourly rows written", 0) for p in ended),
        "partitions": partitions,
        "pass_s": [round(p.end - p.start, 2) for p in ended if p.end is not None],
    }


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.loadtest.pruner", description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=positive_float, required=True, help="seconds from one pass's start to the next")
    parser.add_argument("--log", type=Path, required=True, help="the JSON lines file to append to")
    parser.add_argument("--first-at", type=float, default=0.0, help="Unix time of the first pass (default: now)")
    parser.add_argument("--until", type=float, default=float("inf"), help="Unix time from which no pass starts")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.db import close_old_connections

    from dashboard.retention.runner import run_retention

    at = max(args.first_at, time.time())
    with args.log.open("ab") as log:
        while at < args.until:
            time.sleep(max(0.0, at - time.time()))
            start = time.time()
            log.write(orjson.dumps({"start": start}) + b"\n")
            log.flush()
            done = run_retention()
            log.write(orjson.dumps({"start": start, "end": time.time(), "done": done}) + b"\n")
            log.flush()
            close_old_connections()  # as the pass does in a worker: drop a broken or expired connection
            at = max(at + args.every, time.time())
    # Then wait to be stopped: the load test takes a process that ends before it is stopped for a crash.
    signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
