"""Run one node's share of a collective job: spawn its ranks and watch them.

A job is one `run_node` call per node. Node 0's launcher hosts the job's
rendezvous (a torch.distributed TCPStore on master_port) for as long as its
ranks run; every rank, on every node, connects to it with its global rank
node_rank × ranks_per_node + local_rank. Ranks are child processes
(`python -m workers.collective`); they report JSON lines on a pipe each, and
rank 0's rows are handed to `on_row` as they complete. Subprocesses rather
than multiprocessing: they start from Celery's daemonic pool processes, they
leave no helper process (resource tracker) behind, and a rank exits by
itself when its launcher is killed.

The launcher's deadline is the job's time limit: whatever happens (a rank
killed, a node that never comes, a hung collective, a cancel), `run_node`
returns within spec.timeout plus a few seconds of cleanup, with every child
process gone.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpulse.job_status import JobStatus
from gpulse.sweep_spec import Row, SpecError, SweepSpec
from workers.collective import ARRIVED_KEY

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
_POLL_S = 0.05
# cancel may be a network call (a Redis key on a 1,000-node cluster): ask
# twice a second, not at every poll.
_CANCEL_POLL_S = 0.5
# After a first rank fails, wait this long for the others to exit so the
# reason names the rank that died, not the peers that lost it.
_FAILURE_GRACE_S = 2.0
_TERMINATE_GRACE_S = 3.0


@dataclass
class NodeResult:
    status: JobStatus  # succeeded, failed, cancelled or timed_out
    reason: str | None  # one line for a person; None when succeeded
    spec: SweepSpec
    rows: list[Row] = field(default_factory=list)  # rank 0's, so only node 0 has any
    versions: dict = field(default_factory=dict)
    duration_s: float = 0.0
    # A rank died without saying why (killed, crashed): the likely cause of a
    # multi-node job's failure, where its peers' broken connections are consequences.
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == JobStatus.SUCCEEDED

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "spec": self.spec.to_dict(),
                "rows": [row.to_dict() for row in self.rows], "versions": self.versions,
                "duration_s": self.duration_s}


def resolve_spec(spec: SweepSpec) -> SweepSpec:
    """Return spec with a concrete backend and rank count for this node.

    Resolving `auto` and the default rank count looks at this node's GPUs;
    a multi-node job should be resolved once by the control side so that
    every node runs the same backend and world size.
    """
    import torch

    cuda = torch.cuda.is_available()
    backend = spec.backend if spec.backend != "auto" else ("nccl" if cuda else "gloo")
    gpus = torch.cuda.device_count() if cuda else 0
    ranks = spec.ranks_per_node or (gpus if backend == "nccl" else 1)
    if backend == "nccl":
        if not cuda:
            raise SpecError("backend nccl needs CUDA GPUs and this node has none: use gloo or auto")
        if ranks > gpus:
            raise SpecError(f"backend nccl runs one rank per GPU: {ranks} ranks asked, this node has {gpus} GPUs")
    return dataclasses.replace(spec, backend=backend, ranks_per_node=ranks)


def collect_versions() -> dict:
    """Return the software this node benchmarks with (None where not present)."""
    import torch

    cuda = torch.cuda.is_available()
    nccl = None
    if cuda and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return {"torch": torch.__version__, "nccl": nccl, "cuda": torch.version.cuda if cuda else None,
            "driver": _driver_version(), "python": platform.python_version(),
            "hostname": socket.gethostname()}


def _driver_version() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


class _Rank:
    """One child process and what it has told the launcher."""

    def __init__(self, spec: SweepSpec, local_rank: int):
        self.global_rank = spec.global_rank(local_rank)
        self.log = tempfile.TemporaryFile()
        read_fd, write_fd = os.pipe()
        self.fd: int | None = read_fd  # None once the rank closed its end
        command = [sys.executable, "-m", "workers.collective", "--local-rank", str(local_rank),
                   "--report-fd", str(write_fd), "--parent-pid", str(os.getpid()),
                   "--spec", json.dumps(spec.to_dict())]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_REPO_ROOT, os.environ.get("PYTHONPATH")])))
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log,
                                         stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(write_fd)
        self.buffer = b""
        self.ready = self.done = False
        self.error: str | None = None
        self.exit_code: int | None = None
        self.failed_at: float | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.exit_code is not None and (self.exit_code != 0 or not self.done))

    @property
    def crashed(self) -> bool:
        """Whether it died without saying why (a signal, a crash): the likely cause."""
        return self.error is None and self.exit_code is not None and self.exit_code != 0

    def read(self) -> list[dict]:
        assert self.fd is not None  # read only while open
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            os.close(self.fd)
            self.fd = None
            return []
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [_decode(line) for line in lines if line.strip()]

    def describe_failure(self) -> str:
        name = f"rank {self.global_rank}"
        if self.error is not None:
            return f"{name} failed: {self.error}"
        if self.exit_code is not None and self.exit_code < 0:
            return f"{name} exited with code {self.exit_code} ({signal.Signals(-self.exit_code).name})"
        if self.exit_code:
            last = self._last_log_line()
            return f"{name} exited with code {self.exit_code}" + (f": {last}" if last else "")
        return f"{name} exited before finishing the sweep"

    def _last_log_line(self) -> str:
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def reap(self, deadline: float) -> None:
        """Wait for the process until deadline, then kill it."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.log.close()


def run_node(spec: SweepSpec, on_row: Callable[[Row], None] | None = None,
             cancel: threading.Event | Callable[[], bool] | None = None) -> NodeResult:
    """Run this node's ranks of the job to the end and return how it went.

    cancel (an Event, or a callable saying whether to stop) is asked twice
    a second.
    Failures of the job are returned, not raised; on_row's exceptions
    propagate, after the ranks are stopped.
    """
    started = time.monotonic()
    try:
        spec = resolve_spec(spec)
    except SpecError as exc:
        return NodeResult(JobStatus.FAILED, str(exc), spec, duration_s=time.monotonic() - started)
    versions = collect_versions()
    store = None
    if spec.node_rank == 0:
        try:
            store = _host_rendezvous(spec)
        except RuntimeError as exc:
            refused = f"cannot host the rendezvous on port {spec.master_port}: {exc}".splitlines()[0]
            return NodeResult(JobStatus.FAILED, refused, spec, versions=versions, duration_s=time.monotonic() - started)
        spec = dataclasses.replace(spec, master_port=store.port)
    ranks: list[_Rank] = []
    rows: list[Row] = []
    try:
        assert spec.ranks_per_node is not None  # resolve_spec resolved it
        for local_rank in range(spec.ranks_per_node):
            ranks.append(_Rank(spec, local_rank))
        cancelled = getattr(cancel, "is_set", cancel) or (lambda: False)
        status, reason = _supervise(spec, ranks, store, rows, on_row, cancelled, deadline=started + spec.timeout)
        crashed = status == JobStatus.FAILED and any(rank.crashed for rank in ranks)
    finally:
        for rank in ranks:
            rank.terminate()
        stop_by = time.monotonic() + _TERMINATE_GRACE_S
        for rank in ranks:
            rank.reap(stop_by)
            rank.close()
        del store  # shuts the rendezvous server down
    return NodeResult(status, reason, spec, rows, versions, duration_s=time.monotonic() - started, crashed=crashed)


def _host_rendezvous(spec: SweepSpec):
    import torch.distributed as dist

    return dist.TCPStore(spec.master_addr, spec.master_port, world_size=spec.world_size, is_master=True,
                         wait_for_workers=False, timeout=datetime.timedelta(seconds=spec.timeout))


def _supervise(spec, ranks, store, rows, on_row, cancelled, deadline) -> tuple[JobStatus, str | None]:
    first_failure = None
    next_cancel_poll = 0.0
    rows_seen = 0
    while True:
        open_fds = [rank.fd for rank in ranks if rank.fd is not None]
        if open_fds:
            readable = select.select(open_fds, [], [], _POLL_S)[0]
        else:
            readable = []
            time.sleep(_POLL_S)
        for rank in ranks:
            if rank.fd in readable:
                for message in rank.read():
                    _handle(rank, message, rows, on_row)
        for rank in ranks:
            if rank.exit_code is None and rank.proc.poll() is not None:
                rank.exit_code = rank.proc.returncode
                while rank.fd is not None:  # what it wrote before exiting
                    for message in rank.read():
                        _handle(rank, message, rows, on_row)
            if rank.failed and rank.failed_at is None:
                rank.failed_at = time.monotonic()
        failed = [rank for rank in ranks if rank.failed]
        if failed:
            now = time.monotonic()
            first_failure = first_failure or now
            everyone_exited = all(rank.exit_code is not None for rank in ranks)
            if everyone_exited or now - first_failure > _FAILURE_GRACE_S or now >= deadline:
                return JobStatus.FAILED, _failure_reason(failed)
            continue  # a failure is the better reason than a cancel or a timeout
        if all(rank.done and rank.exit_code == 0 for rank in ranks):
            return JobStatus.SUCCEEDED, None
        # Also ask after each row: a caller may decide to stop on what it saw.
        if time.monotonic() >= next_cancel_poll or len(rows) > rows_seen:
            rows_seen = len(rows)
            if cancelled():
                return JobStatus.CANCELLED, "cancelled before the sweep finished"
            next_cancel_poll = time.monotonic() + _CANCEL_POLL_S
        if time.monotonic() >= deadline:
            return JobStatus.TIMED_OUT, _timeout_reason(spec, ranks, store, rows)


def _decode(line: bytes) -> dict:
    try:
        return json.loads(line)
    except ValueError:
        return {"kind": "error", "message": f"sent an unreadable report: {line[:100]!r}"}


def _handle(rank: _Rank, message: dict, rows: list[Row], on_row) -> None:
    kind = message.get("kind")
    if kind == "row":
        row = Row(**message["row"])
        rows.append(row)
        if on_row is not None:
            on_row(row)
    elif kind == "ready":
        rank.ready = True
    elif kind == "done":
        rank.done = True
    elif kind == "error":
        rank.error = message["message"]


def _failure_reason(failed: list[_Rank]) -> str:
    # A rank that died without a word (killed, crashed) is the cause; the
    # ranks that then report a broken connection are its consequence.
    first = min(failed, key=lambda rank: (not rank.crashed, rank.failed_at))
    others = len(failed) - 1
    if not others:
        return first.describe_failure()
    return first.describe_failure() + f" (and {others} other rank{'s' if others > 1 else ''} failed)"


def _timeout_reason(spec: SweepSpec, ranks: list[_Rank], store, rows: list[Row]) -> str:
    after = f"timed out after {spec.timeout:g} s"
    where = f"{spec.master_addr}:{spec.master_port}"
    if not all(rank.ready for rank in ranks):
        if store is None:
            return f"{after} waiting for the rendezvous at {where}"
        missing = spec.world_size - int(store.add(ARRIVED_KEY, 0))
        return f"{after} waiting for {missing} of {spec.world_size} ranks to join the rendezvous at {where}"
    if rows:
        return f"{after} during the sweep (last completed size {rows[-1].size} B)"
    return f"{after} during the sweep"
