"""What an all-reduce sweep is, without torch: its parameters (SweepSpec, with
their validation), the message sizes, the rows it yields and nccl-tests'
bandwidth formulas.

The web, the control worker and the node launcher import this module; only
the rank runtime (workers/allreduce.py) loads torch.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from typing import NamedTuple

OP = "all_reduce"
REDOP = "sum"
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
# The job's limit ends before Celery's hard limit (workers/celery_app.py) kills its tasks.
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
