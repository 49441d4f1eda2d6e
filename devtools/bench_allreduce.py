"""Side by side: gpulse's all-reduce engine against a plain torch.distributed loop.

Both run the same ranks on this machine with gloo and time the same way:
warm-up, barrier, perf_counter around the timed iterations, the slowest
rank's time. Rounds alternate which goes first, so drift in the machine
(other load, frequency) hits both alike; the medians are compared.

    .venv/bin/python -m devtools.bench_allreduce [--rounds 5] [--min-bytes 1M] [--max-bytes 16M]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from collectors.arguments import positive_int
from devtools.redis_server import free_port
from gpulse.sweep_spec import DTYPES, SweepSpec, busbw, parse_size, sweep_sizes
from workers.launcher import run_node

ROOT = Path(__file__).resolve().parent.parent


def plain_rank(rank: int, world: int, port: int, sizes: list[int], warmup: int, iters: int) -> None:
    """One rank of the plain loop: what a person would write by hand."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    seconds = {}
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        elapsed = torch.tensor([(time.perf_counter() - began) / iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds[size] = elapsed.item()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(seconds))


def run_plain(world: int, sizes: list[int], warmup: int, iters: int) -> dict[int, float]:
    """Return busbw (GB/s) per size of the plain loop."""
    port = free_port()  # the race with other programs for it is acceptable here
    args = ["--port", str(port), "--sizes", ",".join(map(str, sizes)), "--warmup", str(warmup),
            "--iters", str(iters), "--world", str(world)]
    procs = [subprocess.Popen([sys.executable, "-m", "devtools.bench_allreduce", "--plain-rank", str(rank), *args],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True) for rank in range(world)]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        raise SystemExit(f"plain loop failed: exit codes {[proc.returncode for proc in procs]}")
    seconds = json.loads(outputs[0])
    return {size: busbw("all_reduce", size / seconds[str(size)] / 1e9, world) for size in sizes}


def run_engine(world: int, min_bytes: int, max_bytes: int, factor: int, warmup: int,
               iters: int) -> dict[int, tuple[float, float]]:
    """Return (in-place, out-of-place) busbw per size of gpulse's engine."""
    spec = SweepSpec(backend="gloo", ranks_per_node=world, min_bytes=min_bytes, max_bytes=max_bytes,
                     factor=factor, warmup=warmup, iters=iters, check=False, timeout=600)
    result = run_node(spec)
    if not result.ok:
        raise SystemExit(f"engine {result.status}: {result.reason}")
    inplace = {row.size: row.busbw for row in result.rows if row.inplace}
    outplace = {row.size: row.busbw for row in result.rows if not row.inplace}
    return {size: (inplace[size], outplace[size]) for size in inplace}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--ranks", type=positive_int, default=2)
    parser.add_argument("--min-bytes", type=parse_size, default="1M")
    parser.add_argument("--max-bytes", type=parse_size, default="16M")
    parser.add_argument("--factor", type=positive_int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=positive_int, default=20)
    parser.add_argument("--plain-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_rank is not None:
        sizes = [int(size) for size in args.sizes.split(",")]
        plain_rank(args.plain_rank, args.world, args.port, sizes, args.warmup, args.iters)
        return

    sizes = sweep_sizes(args.min_bytes, args.max_bytes, args.factor, DTYPES["float32"].itemsize)
    engine_in: dict[int, list[float]] = {size: [] for size in sizes}
    engine_out: dict[int, list[float]] = {size: [] for size in sizes}
    plain: dict[int, list[float]] = {size: [] for size in sizes}
    for round_no in range(args.rounds):
        def engine():
            for size, (inplace, outplace) in run_engine(args.ranks, args.min_bytes, args.max_bytes,
                                                         args.factor, args.warmup, args.iters).items():
                engine_in[size].append(inplace)
                engine_out[size].append(outplace)

        def loop():
            for size, value in run_plain(args.ranks, sizes, args.warmup, args.iters).items():
                plain[size].append(value)

        for run in (engine, loop) if round_no % 2 == 0 else (loop, engine):
            run()
        print(f"# round {round_no + 1}/{args.rounds} done", file=sys.stderr)

    print(f"# gloo, {args.ranks} ranks on {socket.gethostname()}, float32, {args.warmup} warm-up + "
          f"{args.iters} timed iterations, median busbw (GB/s) of {args.rounds} alternating rounds")
    print("%12s  %14s  %12s  %15s  %8s   %s" % ("size (B)", "engine in-pl.", "plain loop", "engine out-pl.",
                                                "in/plain", "spread engine in-pl. | plain (min-max)"))
    for size in sizes:
        engine_med, plain_med = statistics.median(engine_in[size]), statistics.median(plain[size])
        print("%12d  %14.3f  %12.3f  %15.3f  %8.3f   %.3f-%.3f | %.3f-%.3f" % (
            size, engine_med, plain_med, statistics.median(engine_out[size]), engine_med / plain_med,
            min(engine_in[size]), max(engine_in[size]), min(plain[size]), max(plain[size])))


if __name__ == "__main__":
    main()
