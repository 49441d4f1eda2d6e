"""One rank of an all-reduce sweep, nccl-tests style: the torch runtime.

The launcher (workers/launcher.py) starts one process per rank with
`python -m workers.allreduce ...`; each joins the job's rendezvous, sweeps the
message sizes and reports to the launcher as JSON lines on an inherited pipe.
What a sweep is (its spec, sizes, rows, formulas) lives in workers/sweep_spec.py,
which the web imports without loading torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time
from typing import NamedTuple

from workers.errors import in_a_line
from workers.sweep_spec import DTYPES, REDOP, Row, SweepSpec, algbw, busbw, sweep_sizes

# Store key each rank increments on connecting, so the node-0 launcher can say
# how many ranks a stuck rendezvous is still waiting for.
ARRIVED_KEY = "gpulse/arrived"

# Ranks' own timeouts (store connect, collectives) run this much longer than
# the job's limit, so the launcher's deadline is always the one that decides.
RANK_TIMEOUT_SLACK_S = 5.0


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
        assert self.expected is not None  # built whenever spec.check asks for checks
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
        report.send("error", message=in_a_line(exc))
        sys.exit(1)


if __name__ == "__main__":
    main()
