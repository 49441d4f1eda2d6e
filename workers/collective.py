"""One rank of a collective sweep, nccl-tests style: the torch runtime.

The launcher (workers/launcher.py) starts one process per rank with
`python -m workers.collective ...`; each joins the job's rendezvous, sweeps the
message sizes of its operation (all_reduce, all_gather, reduce_scatter,
alltoall, broadcast, reduce or sendrecv) and reports to the launcher as JSON
lines on an inherited pipe. What a sweep is (its spec, operations, sizes, rows,
formulas) lives in gpulse/sweep_spec.py, which the web imports without
loading torch.
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

from gpulse.sweep_spec import DTYPES, Row, SweepSpec, algbw, busbw
from workers.errors import in_a_line

# Store key each rank increments on connecting, so the node-0 launcher can say
# how many ranks a stuck rendezvous is still waiting for.
ARRIVED_KEY = "gpulse/arrived"

# Ranks' own timeouts (store connect, collectives) run this much longer than
# the job's limit, so the launcher's deadline is always the one that decides.
RANK_TIMEOUT_SLACK_S = 5.0
# Test-only: milliseconds this node's ranks wait after each timed iteration, as
# behind a slow link (tests/test_fabric_sweep.py slows one node of a sweep so).
TEST_DELAY_ENV = "GPULSE_TEST_RANK_DELAY_MS"


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


def _fill(buffer, pattern: Pattern, rank: int, first: int = 0) -> None:
    """Fill ``buffer`` with rank ``rank``'s data for elements ``first`` on (of the pattern's numbering)."""
    if rank >= pattern.contributors:
        buffer.zero_()
        return
    for start in range(0, buffer.numel(), _CHUNK):
        stop = min(start + _CHUNK, buffer.numel())
        slots = _slots(first + start, first + stop, pattern.modulus, buffer.device)
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
    """The per-rank state of one sweep: buffers, device, timing, and each operation's step and check.

    Every rank's send buffer holds its data for elements 0 … (Pattern.value of
    element i's slot); a message of ``count`` elements is its first ``count``.
    Where an operation splits a message into per-rank parts (all_gather's
    inputs, reduce_scatter's outputs, alltoall's), a part is ``count``
    elements; part j of a split message is elements j·count … of the sender's data.
    """

    def __init__(self, spec: SweepSpec, local_rank: int, report: _Reporter):
        import torch
        import torch.distributed as dist

        self.spec = spec
        self.op = spec.collective
        self.rank = spec.global_rank(local_rank)
        self.world = spec.world_size
        self.report = report
        self.cuda = spec.backend == "nccl"
        self.device = torch.device("cuda", local_rank) if self.cuda else torch.device("cpu")
        self.dtype = getattr(torch, spec.dtype)
        self.dist = dist
        self.type_name = DTYPES[spec.dtype].nccl_name
        self.sizes = spec.sizes()
        max_count = max(size for size, _ in self.sizes) // DTYPES[spec.dtype].itemsize
        self.pattern = pattern_for(self.world, spec.dtype)
        self.send = torch.empty(max_count, dtype=self.dtype, device=self.device)
        self.recv = torch.zeros(max_count, dtype=self.dtype, device=self.device)
        _fill(self.send, self.pattern, self.rank)
        # The sums of every element, for the operations that reduce (a message's are its first elements).
        reduces = spec.op in ("all_reduce", "reduce_scatter", "reduce")
        self.sums = _expected(max_count, self.pattern, self.dtype, self.device) if spec.check and reduces else None
        self.test_delay_s = float(os.environ.get(TEST_DELAY_ENV) or 0) / 1000

    def run(self) -> None:
        for size, count in self.sizes:
            for inplace in (False, True) if self.op.in_place else (False,):
                row = self._measure(size, count, inplace)
                if self.rank == 0:
                    self.report.send("row", row=row.to_dict())

    def _measure(self, size: int, count: int, inplace: bool) -> Row:
        step = self._step(count, inplace)
        for _ in range(self.spec.warmup):
            step()
        seconds = self._max_over_ranks(self._time(step))
        wrong = self._check(count) if self.spec.check else None
        alg = algbw(size, seconds)
        return Row(size=size, count=count, type=self.type_name, redop=self.op.redop, time_us=seconds * 1e6,
                   algbw=alg, busbw=busbw(self.spec.op, alg, self.world), wrong=wrong, inplace=inplace)

    def _step(self, count: int, inplace: bool):
        """Return one timed iteration of the operation on a message of ``count`` elements (its part, where split).

        torch.distributed's all_reduce, broadcast and reduce only work in
        place: out-of-place copies the input into the output first, as torch's
        functional collectives do, and that copy is part of the measured time.
        In place for the split operations, as nccl-tests places them: the
        input is this rank's part of the output (all_gather), the output this
        rank's part of the input (reduce_scatter).
        """
        dist, op, world = self.dist, self.spec.op, self.world
        send, recv, rank = self.send, self.recv, self.rank
        root = self.op.root
        if op in ("all_reduce", "broadcast", "reduce"):
            message = recv[:count]

            def collective():
                if op == "all_reduce":
                    dist.all_reduce(message)
                elif op == "broadcast":
                    dist.broadcast(message, root)
                else:
                    dist.reduce(message, root)

            if inplace:
                return collective

            def copy_then_collective():
                message.copy_(send[:count])
                collective()

            return copy_then_collective
        if op == "all_gather":
            output = recv[:count * world]
            part = output[rank * count:(rank + 1) * count] if inplace else send[:count]
            return lambda: dist.all_gather_single(output, part)
        if op == "reduce_scatter":
            message = recv[:count * world] if inplace else send[:count * world]
            part = message[rank * count:(rank + 1) * count] if inplace else recv[:count]
            return lambda: dist.reduce_scatter_single(part, message)
        if op == "alltoall":
            return lambda: dist.all_to_all_single(recv[:count * world], send[:count * world])
        return self._send_recv(send[:count], recv[:count])

    def _send_recv(self, outgoing, incoming):
        """Send to the next rank while receiving from the previous one, as sendrecv_perf's ring."""
        dist, rank, world = self.dist, self.rank, self.world

        def step():
            ops = [dist.P2POp(dist.isend, outgoing, (rank + 1) % world),
                   dist.P2POp(dist.irecv, incoming, (rank - 1) % world)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

        return step

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
            if self.test_delay_s:
                time.sleep(self.test_delay_s)
        return (time.perf_counter() - began) / self.spec.iters

    def _max_over_ranks(self, seconds: float) -> float:
        # The slowest rank's time: a collective is done when every rank has
        # its result. (nccl-tests defaults to the mean over ranks, -a 1; after
        # the barrier the two differ by the ranks' skew leaving the last op.)
        import torch

        value = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return float(value.item())

    def _check(self, count: int) -> int:
        """Return the wrong elements of one fresh out-of-place run of the operation, summed over all ranks."""
        import torch

        # send still holds this rank's data (only in-place timings write over
        # their inputs, in recv), so a fresh run needs no refill.
        corrupt = self.rank == self.spec.corrupt_rank
        if corrupt:
            self.send[0] += 1
        self._step(count, inplace=False)()
        if corrupt:
            self.send[0] -= 1
        got, expected = self._result(count)
        wrong = torch.zeros(1, dtype=torch.int64, device=self.device)
        if expected is not None:
            wrong += (got != expected).sum().to(torch.int64)
        self.dist.all_reduce(wrong)
        return int(wrong.item())

    def _result(self, count: int):
        """Return this rank's output of the run _check made and what it must hold (None: this rank has none)."""
        import torch

        op, rank, world, recv = self.spec.op, self.rank, self.world, self.recv
        if op == "all_reduce" or (op == "reduce" and rank == self.op.root):
            assert self.sums is not None  # built whenever spec.check asks for checks
            return recv[:count], self.sums[:count]
        if op == "reduce":
            return None, None  # only the root receives a reduction
        if op == "reduce_scatter":
            assert self.sums is not None
            return recv[:count], self.sums[rank * count:(rank + 1) * count]
        expected = torch.empty(count * (world if self.op.split else 1), dtype=self.dtype, device=self.device)
        if op == "broadcast":
            _fill(expected, self.pattern, self.op.root)
        elif op == "sendrecv":
            _fill(expected, self.pattern, (rank - 1) % world)
        else:
            # Part j is rank j's: its first part (all_gather), or its part for this rank (alltoall).
            first = rank * count if op == "alltoall" else 0
            for sender in range(world):
                _fill(expected[sender * count:(sender + 1) * count], self.pattern, sender, first)
        return recv[:expected.numel()], expected


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
    parser = argparse.ArgumentParser(description="One rank of a gpulse collective sweep (started by the launcher).")
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
