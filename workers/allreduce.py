"""The all-reduce sweep, nccl-tests style, run inside each rank.

The launcher (workers/launcher.py) starts one process per rank with
`python -m workers.allreduce ...`; each joins the job's rendezvous, sweeps the
message sizes and reports to the launcher as JSON lines on an inherited pipe.

The top of this module (spec, sizes, formulas, data pattern) imports no torch,
so the web process can validate a launch form without loading it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

OP = "all_reduce"
REDOP = "sum"
BACKENDS = ("auto", "nccl", "gloo")
MiB = 1 << 20

# Store key each rank increments on connecting, so the node-0 launcher can say
# how many ranks a stuck rendezvous is still waiting for.
ARRIVED_KEY = "gpulse/arrived"

# Ranks' own timeouts (store connect, collectives) run this much longer than
# the job's limit, so the launcher's deadline is always the one that decides.
RANK_TIMEOUT_SLACK_S = 5.0


class DType(NamedTuple):
    nccl_name: str  # as all_reduce_perf prints it in the "type" column
    itemsize: int  # bytes
    exact_limit: int  # every integer 0..exact_limit is exact in this dtype


DTYPES = {
    "float32": DType("float", 4, 1 << 24),
    "bfloat16": DType("bfloat16", 2, 1 << 8),
    "float16": DType("half", 2, 1 << 11),
}


class SpecError(ValueError):
    """A sweep parameter a person must correct; the message says how."""


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str | int) -> int:
    """Return bytes from "4096", "1K", "64M" or "1G" (binary, as nccl-tests' -b/-e)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise SpecError(f"bad size {text!r}: use a number of bytes with an optional K, M or G suffix, e.g. 64M")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


@dataclass(frozen=True)
class SweepSpec:
    """One node's share of an all-reduce job; invalid values raise SpecError."""

    backend: str = "auto"  # auto = nccl where CUDA is available, else gloo
    dtype: str = "float32"
    min_bytes: int = 1 << 10
    max_bytes: int = 64 * MiB
    factor: int = 2
    warmup: int = 5  # untimed iterations before each measurement
    iters: int = 20  # timed iterations per measurement
    check: bool = True
    nnodes: int = 1
    node_rank: int = 0
    ranks_per_node: int | None = None  # None: one per GPU, or 1 without GPUs
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: node 0 picks a free port (single-node jobs only)
    timeout: float = 300.0  # seconds for the whole job, rendezvous included
    # Diagnostic of the checker itself: this global rank adds 1 to one element
    # of its input before every correctness check, so #wrong must come out > 0.
    corrupt_rank: int | None = None
    op: str = OP

    def __post_init__(self):
        if self.op != OP:
            raise SpecError(f"unknown operation {self.op!r}: only {OP} is supported")
        if self.backend not in BACKENDS:
            raise SpecError(f"unknown backend {self.backend!r}: use one of {', '.join(BACKENDS)}")
        if self.dtype not in DTYPES:
            raise SpecError(f"unknown dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        _require(self.min_bytes >= 1, f"min bytes must be at least 1, not {self.min_bytes}")
        _require(self.max_bytes >= self.min_bytes,
                 f"max bytes ({self.max_bytes}) is smaller than min bytes ({self.min_bytes})")
        _require(self.factor >= 2, f"step factor must be an integer of at least 2, not {self.factor}")
        _require(self.warmup >= 0, f"warm-up iterations cannot be negative ({self.warmup})")
        _require(self.iters >= 1, f"timed iterations must be at least 1, not {self.iters}")
        _require(self.nnodes >= 1, f"nodes must be at least 1, not {self.nnodes}")
        _require(0 <= self.node_rank < self.nnodes,
                 f"node rank {self.node_rank} is outside 0..{self.nnodes - 1}")
        _require(self.ranks_per_node is None or self.ranks_per_node >= 1,
                 f"ranks per node must be at least 1, not {self.ranks_per_node}")
        _require(0 <= self.master_port <= 65535, f"master port {self.master_port} is outside 0..65535")
        _require(self.nnodes == 1 or self.master_port != 0,
                 "a multi-node job needs a master port chosen up front, so all nodes meet on it")
        _require(self.timeout > 0, f"timeout must be positive, not {self.timeout}")
        _require(self.corrupt_rank is None or self.ranks_per_node is None
                 or 0 <= self.corrupt_rank < self.world_size,
                 f"corrupt rank {self.corrupt_rank} is not a rank of this job")

    @property
    def world_size(self) -> int:
        if self.ranks_per_node is None:
            raise SpecError("ranks per node is not resolved yet")
        return self.nnodes * self.ranks_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.ranks_per_node + local_rank

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SweepSpec:
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise SpecError(f"unknown sweep parameters: {', '.join(sorted(unknown))}")
        return cls(**data)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int, itemsize: int) -> list[int]:
    """Return the message sizes in bytes: min, min×factor, … up to max, whole elements."""
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        aligned = max(1, size // itemsize) * itemsize
        if not sizes or aligned != sizes[-1]:
            sizes.append(aligned)
        size *= factor
    return sizes


def algbw(size_bytes: int, seconds: float) -> float:
    """Return the algorithm bandwidth in GB/s (1e9 bytes/s), as nccl-tests."""
    return size_bytes / seconds / 1e9


def busbw(algbw_gbs: float, world_size: int) -> float:
    """Return the bus bandwidth of an all-reduce: what each link carried.

    A ring all-reduce moves 2(n−1)/n of the buffer through every rank's link,
    so this compares with the hardware's link speed whatever n is; one rank
    moves nothing, hence 0 (nccl-tests prints the same).
    """
    return algbw_gbs * 2 * (world_size - 1) / world_size


@dataclass(frozen=True)
class Row:
    """One measurement, nccl-tests' columns; wrong is None when the check is off."""

    size: int
    count: int
    type: str
    redop: str
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None
    inplace: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# The check's data: element i of rank r holds (slot(i)·(r+1) + r) mod m, where
# slot hashes i into 0..m-1. Small integers sum exactly in every dtype, so the
# expected sum is exact and any difference is a real error; hashing i (rather
# than i mod m) means a chunk reduced into the wrong place does not line up
# with a period of the pattern and still shows.
_KNUTH = 2654435761


class Pattern(NamedTuple):
    modulus: int
    contributors: int  # ranks below this fill data; the rest fill zeros

    def value(self, slot: int, rank: int) -> int:
        if rank >= self.contributors:
            return 0
        return (slot * (rank + 1) + rank) % self.modulus

    def expected(self, slot: int) -> int:
        return sum(self.value(slot, rank) for rank in range(self.contributors))


def pattern_for(world_size: int, dtype: str) -> Pattern:
    """Return the largest pattern (modulus ≤ 8) whose sums stay exact in dtype."""
    limit = DTYPES[dtype].exact_limit
    # Beyond `limit` ranks even 0/1 values could sum past exactness, so only
    # the first `limit` ranks contribute data (bfloat16 beyond 256 ranks).
    contributors = min(world_size, limit)
    return Pattern(modulus=max(2, min(8, limit // contributors + 1)), contributors=contributors)


# --- everything below runs inside a rank process and uses torch ---------------

_CHUNK = 1 << 22  # elements per step when building data, to bound temporaries


def _slots(start: int, stop: int, modulus: int, device):
    import torch

    index = torch.arange(start, stop, dtype=torch.int64, device=device)
    return (((index * _KNUTH) & 0xFFFFFFFF) >> 16) % modulus


def _fill(buffer, pattern: Pattern, rank: int) -> None:
    if rank >= pattern.contributors:
        buffer.zero_()
        return
    for start in range(0, buffer.numel(), _CHUNK):
        stop = min(start + _CHUNK, buffer.numel())
        slots = _slots(start, stop, pattern.modulus, buffer.device)
        buffer[start:stop].copy_((slots * (rank + 1) + rank) % pattern.modulus)


def _expected(count: int, pattern: Pattern, dtype, device):
    import torch

    table = torch.tensor([pattern.expected(s) for s in range(pattern.modulus)], dtype=dtype, device=device)
    out = torch.empty(count, dtype=dtype, device=device)
    for start in range(0, count, _CHUNK):
        stop = min(start + _CHUNK, count)
        out[start:stop] = table[_slots(start, stop, pattern.modulus, device)]
    return out


class _Reporter:
    """JSON lines to the launcher over the inherited pipe."""

    def __init__(self, fd: int):
        self._file = os.fdopen(fd, "w", buffering=1)

    def send(self, kind: str, **fields) -> None:
        self._file.write(json.dumps({"kind": kind, **fields}) + "\n")


class _Sweep:
    """The per-rank state of one sweep: buffers, device, timing."""

    def __init__(self, spec: SweepSpec, local_rank: int, report: _Reporter):
        import torch
        import torch.distributed as dist

        self.spec = spec
        self.rank = spec.global_rank(local_rank)
        self.world = spec.world_size
        self.report = report
        self.cuda = spec.backend == "nccl"
        self.device = torch.device("cuda", local_rank) if self.cuda else torch.device("cpu")
        self.dtype = getattr(torch, spec.dtype)
        self.dist = dist
        info = DTYPES[spec.dtype]
        self.type_name = info.nccl_name
        self.sizes = sweep_sizes(spec.min_bytes, spec.max_bytes, spec.factor, info.itemsize)
        max_count = self.sizes[-1] // info.itemsize
        self.pattern = pattern_for(self.world, spec.dtype)
        self.send = torch.empty(max_count, dtype=self.dtype, device=self.device)
        self.recv = torch.zeros(max_count, dtype=self.dtype, device=self.device)
        _fill(self.send, self.pattern, self.rank)
        self.expected = _expected(max_count, self.pattern, self.dtype, self.device) if spec.check else None

    def run(self) -> None:
        itemsize = DTYPES[self.spec.dtype].itemsize
        for size in self.sizes:
            count = size // itemsize
            for inplace in (False, True):
                row = self._measure(size, count, inplace)
                if self.rank == 0:
                    self.report.send("row", row=row.to_dict())

    def _measure(self, size: int, count: int, inplace: bool) -> Row:
        send, recv = self.send[:count], self.recv[:count]
        dist = self.dist
        if inplace:
            def step():
                dist.all_reduce(recv)
        else:
            # torch.distributed only reduces in place; out-of-place copies the
            # input first, as torch's functional all_reduce does, and that
            # copy is part of the measured time.
            def step():
                recv.copy_(send)
                dist.all_reduce(recv)

        for _ in range(self.spec.warmup):
            step()
        seconds = self._max_over_ranks(self._time(step))
        wrong = self._check(send, recv, count) if self.spec.check else None
        alg = algbw(size, seconds)
        return Row(size=size, count=count, type=self.type_name, redop=REDOP, time_us=seconds * 1e6,
                   algbw=alg, busbw=busbw(alg, self.world), wrong=wrong, inplace=inplace)

    def _barrier(self) -> None:
        if self.cuda:
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def _time(self, step) -> float:
        """Return the mean seconds per iteration of step on this rank."""
        import torch

        self._barrier()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.spec.iters):
                step()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / self.spec.iters
        began = time.perf_counter()
        for _ in range(self.spec.iters):
            step()
        return (time.perf_counter() - began) / self.spec.iters

    def _max_over_ranks(self, seconds: float) -> float:
        # The slowest rank's time: an all-reduce is done when every rank has
        # its result. (nccl-tests defaults to the mean over ranks, -a 1; after
        # the barrier the two differ by the ranks' skew leaving the last op.)
        import torch

        value = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return float(value.item())

    def _check(self, send, recv, count: int) -> int:
        """Return the wrong elements of one fresh all-reduce, summed over all ranks."""
        import torch

        # send still holds this rank's pattern (only the in-place timing
        # reduces recv over and over), so a fresh input is one copy away.
        corrupt = self.rank == self.spec.corrupt_rank
        if corrupt:
            send[0] += 1
        recv.copy_(send)
        self.dist.all_reduce(recv)
        if corrupt:
            send[0] -= 1
        wrong = (recv != self.expected[:count]).sum().to(torch.int64).reshape(1)
        self.dist.all_reduce(wrong)
        return int(wrong.item())


def run_rank(spec: SweepSpec, local_rank: int, report: _Reporter) -> None:
    """Join the job's process group, sweep, report rows (rank 0) and leave."""
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=spec.timeout + RANK_TIMEOUT_SLACK_S)
    rank = spec.global_rank(local_rank)
    if spec.backend == "nccl":
        torch.cuda.set_device(local_rank)
    else:
        # The only CPU work is the out-of-place copy; a multi-threaded copy
        # leaves its pool spinning afterwards, stealing the cores gloo's
        # threads (and the other ranks) need, which costs milliseconds.
        torch.set_num_threads(1)
    store = dist.TCPStore(spec.master_addr, spec.master_port, world_size=spec.world_size,
                          is_master=False, timeout=timeout)
    store.add(ARRIVED_KEY, 1)
    dist.init_process_group(
        spec.backend, store=store, rank=rank, world_size=spec.world_size, timeout=timeout,
        device_id=torch.device("cuda", local_rank) if spec.backend == "nccl" else None,
    )
    try:
        report.send("ready", rank=rank)
        _Sweep(spec, local_rank, report).run()
    finally:
        dist.destroy_process_group()
    report.send("done", rank=rank)


def _exit_with_launcher(parent_pid: int) -> None:
    """Exit when the launcher dies (even by SIGKILL), so no rank outlives its job."""

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One rank of a gpulse all-reduce sweep (started by the launcher).")
    parser.add_argument("--spec", required=True, help="the resolved SweepSpec as JSON")
    parser.add_argument("--local-rank", type=int, required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    _exit_with_launcher(args.parent_pid)
    report = _Reporter(args.report_fd)
    try:
        run_rank(SweepSpec.from_dict(json.loads(args.spec)), args.local_rank, report)
    except Exception as exc:  # every failure goes to the launcher as its reason
        # torch appends C++ stack frames on later lines; the first says what happened.
        first_line = next((line for line in str(exc).splitlines() if line.strip()), "")
        report.send("error", message=f"{type(exc).__name__}: {first_line}".strip()[:500])
        sys.exit(1)


if __name__ == "__main__":
    main()
