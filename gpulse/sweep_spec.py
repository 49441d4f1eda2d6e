"""What a collective sweep is, without torch: its parameters (SweepSpec, with
their validation), the operations (OPS), the message sizes, the rows it
yields and nccl-tests' bandwidth formulas.

The web, the control worker and the node launcher import this module; only
the rank runtime (workers/collective.py) loads torch.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

BACKENDS = ("auto", "nccl", "gloo")
MiB = 1 << 20


class DType(NamedTuple):
    nccl_name: str  # as all_reduce_perf prints it in the "type" column
    itemsize: int  # bytes
    exact_limit: int  # every integer 0..exact_limit is exact in this dtype


DTYPES = {
    "float32": DType("float", 4, 1 << 24),
    "bfloat16": DType("bfloat16", 2, 1 << 8),
    "float16": DType("half", 2, 1 << 11),
}


class Collective(NamedTuple):
    """One operation as the nccl-tests binary that measures it (src/<op>.cu there) prints and counts it."""

    program: str  # the nccl-tests binary whose output a sweep mirrors
    redop: str  # its "redop" column: "sum", or "none" where nothing is reduced
    root: int  # its "root" column: the root rank, -1 for an operation without one
    bus_factor: Callable[[int], float]  # busbw = algbw × this, of the world size
    split: bool  # a message is n equal per-rank parts (the "count" column is one part), as in nccl-tests
    in_place: bool  # torch.distributed can run it with the output over the input


def _ring(world: int) -> float:
    # A ring all-reduce moves 2(n−1)/n of the buffer through every rank's link.
    return 2 * (world - 1) / world


def _all_but_own(world: int) -> float:
    # Each rank sends or receives every part but its own: (n−1)/n of the message.
    return (world - 1) / world


def _whole(world: int) -> float:
    # The whole message crosses each link on its way (a pipelined broadcast or reduce, a send to a peer).
    return 1.0


OPS = {
    "all_reduce": Collective("all_reduce_perf", "sum", -1, _ring, split=False, in_place=True),
    "all_gather": Collective("all_gather_perf", "none", -1, _all_but_own, split=True, in_place=True),
    "reduce_scatter": Collective("reduce_scatter_perf", "sum", -1, _all_but_own, split=True, in_place=True),
    "alltoall": Collective("alltoall_perf", "none", -1, _all_but_own, split=True, in_place=False),
    "broadcast": Collective("broadcast_perf", "none", 0, _whole, split=False, in_place=True),
    "reduce": Collective("reduce_perf", "sum", 0, _whole, split=False, in_place=True),
    "sendrecv": Collective("sendrecv_perf", "sum", -1, _whole, split=False, in_place=False),
}
DEFAULT_OP = "all_reduce"


class SpecError(ValueError):
    """A sweep parameter a person must correct; the message says how."""


# The bounds of a launch: the launch form (dashboard/benchmarks/launch.py) and
# the node side (workers/node_tasks.py, through SweepSpec.from_dict with
# Limits) both use these, so a node refuses any spec the form would refuse.
MAX_RANKS_PER_NODE = 64
MAX_FACTOR = 16
MAX_WARMUP = 1000
MAX_ITERS = 10_000
MIN_TIMEOUT_S = 10
# The job's limit ends before Celery's hard limit (gpulse/celery_contract.py) kills its tasks.
MAX_TIMEOUT_S = 1500
# GPULSE_BENCHMARK_MAX_BYTES's default: every rank holds buffers of the largest size.
DEFAULT_MAX_BYTES = 8 << 30
# A host name (RFC 1123 labels, with '_' as node names may have it) or an IP address:
# what torch.distributed may connect to (the rendezvous is the first node's name by default).
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


@dataclass(frozen=True)
class Limits:
    """The launch form's bounds, for a spec that comes from elsewhere (a node task's message)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_nodes: int = 1024


def _valid_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return _HOSTNAME.fullmatch(text) is not None
    return True


# At most 30 digits: far past any real size, and short of Python's limit on
# converting long digit strings, which would raise something else than SpecError.
_SIZE = re.compile(r"^\s*(\d{1,30})\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str | int) -> int:
    """Return bytes from "4096", "1K", "64M" or "1G" (binary, as nccl-tests' -b/-e)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        shown = repr(text) if len(text) <= 40 else repr(text[:40]) + "…"
        raise SpecError(f"bad size {shown}: use a number of bytes with an optional K, M or G suffix, e.g. 64M")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def format_size(size: int) -> str:
    """Return size with the largest suffix that divides it: 8589934592 -> "8G", parse_size's inverse."""
    for suffix in ("G", "M", "K"):
        if size and size % _SUFFIX[suffix] == 0:
            return f"{size // _SUFFIX[suffix]}{suffix}"
    return str(size)


@dataclass(frozen=True)
class SweepSpec:
    """One node's share of a collective job; invalid values raise SpecError."""

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
    op: str = DEFAULT_OP

    def __post_init__(self):
        if self.op not in OPS:
            raise SpecError(f"unknown operation {str(self.op)[:40]!r}: use one of {', '.join(OPS)}")
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
    def collective(self) -> Collective:
        return OPS[self.op]

    def sizes(self) -> list[tuple[int, int]]:
        """Return the sweep's (size in bytes, count) pairs, as nccl-tests prints them (op_sizes); raise
        SpecError where the operation cannot run over world_size ranks: a sendrecv of one rank (gloo has no
        pair to itself), or no message large enough to give every rank a part."""
        _require(self.op != "sendrecv" or self.world_size > 1,
                 "sendrecv sends each rank's message to the next rank: it needs at least 2 ranks")
        pairs = op_sizes(self.op, self.min_bytes, self.max_bytes, self.factor, DTYPES[self.dtype].itemsize,
                         self.world_size)
        _require(bool(pairs), f"{self.op} splits a message among its {self.world_size} ranks: max bytes"
                              f" {format_size(self.max_bytes)} leaves no rank a part of {PART_ALIGN} bytes;"
                              f" use at least {format_size(PART_ALIGN * self.world_size)}")
        return pairs

    @property
    def world_size(self) -> int:
        if self.ranks_per_node is None:
            raise SpecError("ranks per node is not resolved yet")
        return self.nnodes * self.ranks_per_node

    def global_rank(self, local_rank: int) -> int:
        assert self.ranks_per_node is not None, "ranks per node is not resolved yet"
        return self.node_rank * self.ranks_per_node + local_rank

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, limits: Limits | None = None) -> SweepSpec:
        """Return the spec ``data`` describes; with ``limits``, refuse (SpecError) what the launch form
        would: a wrong type, a value past the form's bounds, a rendezvous that is not a host and port."""
        if not isinstance(data, dict):
            raise SpecError(f"a sweep spec is a JSON object, not {type(data).__name__}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            shown = ", ".join(sorted(str(name)[:40] for name in unknown)[:10])
            raise SpecError(f"unknown sweep parameters: {shown}")
        if limits is not None:
            _check_types(data)
        spec = cls(**data)
        if limits is not None:
            spec.check_bounds(limits)
        return spec

    def check_bounds(self, limits: Limits) -> None:
        """Raise SpecError for a value the launch form would refuse."""
        # None (one per GPU, or 1 without GPUs) is bounded by the node itself.
        _require(self.ranks_per_node is None or 1 <= self.ranks_per_node <= MAX_RANKS_PER_NODE,
                 f"ranks per node must be 1 to {MAX_RANKS_PER_NODE}, not {self.ranks_per_node}")
        _require(self.max_bytes <= limits.max_bytes,
                 f"{format_size(self.max_bytes)} is over this node's limit of {format_size(limits.max_bytes)}"
                 " per message (GPULSE_BENCHMARK_MAX_BYTES)")
        _require(self.factor <= MAX_FACTOR, f"step factor must be at most {MAX_FACTOR}, not {self.factor}")
        _require(self.warmup <= MAX_WARMUP, f"warm-up iterations must be at most {MAX_WARMUP}, not {self.warmup}")
        _require(self.iters <= MAX_ITERS, f"timed iterations must be at most {MAX_ITERS}, not {self.iters}")
        _require(self.nnodes <= limits.max_nodes, f"nodes must be at most {limits.max_nodes}, not {self.nnodes}")
        _require(MIN_TIMEOUT_S <= self.timeout <= MAX_TIMEOUT_S,
                 f"timeout must be {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S} s, not {self.timeout:g}")
        # 0 (node 0 picks a free port) only for a one-node job, as __post_init__ already requires.
        _require(0 <= self.master_port <= 65535, f"master port {self.master_port} is outside 1..65535")
        _require(_valid_host(self.master_addr),
                 f"master address {self.master_addr[:60]!r} is not a host name or an IP address")
        _require(self.corrupt_rank is None, "a launched job never corrupts a rank (a diagnostic of the checker)")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


_TYPES: dict[str, type | tuple[type, ...]] = {
    "backend": str, "dtype": str, "op": str, "master_addr": str, "check": bool, "timeout": (int, float),
    "ranks_per_node": (int, type(None)), "corrupt_rank": (int, type(None))}


def _check_types(data: dict) -> None:
    """Refuse a value of the wrong JSON type, which would otherwise raise something else than SpecError."""
    for name, value in data.items():
        wanted = _TYPES.get(name, int)
        if isinstance(value, bool) and wanted is not bool:
            raise SpecError(f"sweep parameter {name} must be a number, not {value!r}")
        if not isinstance(value, wanted):
            raise SpecError(f"sweep parameter {name} has the wrong type ({type(value).__name__})")


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int, itemsize: int) -> list[int]:
    """Return the message sizes in bytes: min, min×factor, … up to max, whole elements."""
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        aligned = max(1, size // itemsize) * itemsize
        if not sizes or aligned != sizes[-1]:
            sizes.append(aligned)
        size *= factor
    return sizes


# nccl-tests rounds a rank's part of a split message down to 16 bytes (its GetCollByteCount).
PART_ALIGN = 16


def op_sizes(op: str, min_bytes: int, max_bytes: int, factor: int, itemsize: int, world: int) -> list[tuple[int, int]]:
    """Return the (size, count) of each message of a sweep of ``op`` over ``world`` ranks.

    As nccl-tests: size is the larger buffer in bytes; count is the elements of
    one rank's part where the operation splits the message into per-rank parts
    (all_gather, reduce_scatter, alltoall; each part rounded down to 16 bytes,
    and a size too small for every rank to have one left out), else the
    message's elements.
    """
    if not OPS[op].split:
        return [(size, size // itemsize) for size in sweep_sizes(min_bytes, max_bytes, factor, itemsize)]
    align = max(1, PART_ALIGN // itemsize)
    pairs: list[tuple[int, int]] = []
    for size in sweep_sizes(min_bytes, max_bytes, factor, itemsize):
        part = size // itemsize // world // align * align
        if part and (not pairs or pairs[-1][1] != part):
            pairs.append((part * world * itemsize, part))
    return pairs


def algbw(size_bytes: int, seconds: float) -> float:
    """Return the algorithm bandwidth in GB/s (1e9 bytes/s), as nccl-tests: the message's size over the time."""
    return size_bytes / seconds / 1e9


def busbw(op: str, algbw_gbs: float, world_size: int) -> float:
    """Return the bus bandwidth of ``op``: what each link carried, nccl-tests' busBw.

    algbw times the operation's factor (OPS), so it compares with the
    hardware's link speed whatever n is; one rank moves nothing through a link
    in an all-reduce, all_gather, reduce_scatter or alltoall, hence 0 (as
    nccl-tests prints).
    """
    return algbw_gbs * OPS[op].bus_factor(world_size)


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


def avg_busbw(rows: list[Row]) -> float:
    """Return the mean busbw over every measurement, in-place ones included (as nccl-tests)."""
    return sum(row.busbw for row in rows) / len(rows) if rows else 0.0
