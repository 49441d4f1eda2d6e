"""One bandwidth probe of this machine for the collector (collectors/probe.py):
`python -m workers.probe --node gpu-01 --max-bytes 16777216` runs a small
all-reduce among the machine's GPUs with the benchmark engine (NCCL where CUDA
is available, gloo on the CPU elsewhere) and prints the result record as one
JSON line.

It is a process of its own, so the collector imports nothing of the node
runtime and never loads torch. SIGTERM (the collector stopping) or the end of
the process that started it cancels the probe; its ranks are stopped before it
prints the cancelled record and exits.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from gpulse.sweep_spec import SweepSpec, avg_busbw
from workers.launcher import run_node


def probe_once(node: str, max_bytes: int, ranks: int | None, timeout: float,
               cancel: Callable[[], bool] | None = None) -> dict:
    """Run one probe on this machine and return its result record."""
    spec = SweepSpec(backend="auto", min_bytes=max(1024, max_bytes // 16), max_bytes=max_bytes,
                     warmup=2, iters=5, ranks_per_node=ranks, timeout=timeout)
    result = run_node(spec, cancel=cancel)
    largest = [row for row in result.rows if row.size == max((r.size for r in result.rows), default=None)]
    return {
        "v": 1,
        "node": node,
        "ts": time.time(),
        "backend": result.spec.backend,
        "world_size": result.spec.world_size if result.spec.ranks_per_node else None,
        "max_bytes": max_bytes,
        "busbw": max((row.busbw for row in largest), default=None),
        "avg_busbw": avg_busbw(result.rows) if result.rows else None,
        "wrong": sum(row.wrong or 0 for row in result.rows),
        "status": result.status,
        "reason": result.reason,
        "duration_s": round(result.duration_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True, help="the node the record names")
    parser.add_argument("--max-bytes", type=int, required=True, help="largest all-reduce message, in bytes")
    parser.add_argument("--ranks", type=int, help="ranks to run (default: one per GPU, or 1 without GPUs)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds the probe may take (default 120)")
    args = parser.parse_args(argv)
    starter = os.getppid()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    record = probe_once(args.node, args.max_bytes, args.ranks, args.timeout,
                        cancel=lambda: stopping.is_set() or os.getppid() != starter)
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
