"""A simulated GPU fleet: N nodes × G GPUs with believable dynamics and faults.

Each node is homogeneous; nodes take GPU models in turn from MODELS (real
names, framebuffer sizes as NVML reports them, power limits, clocks). Power
follows utilization up to the power limit (where the SM clock drops and
``sw_power_cap`` is set), temperature follows power with a first-order thermal
lag, PCIe / NVLink traffic follows activity, and each GPU's ``energy`` counter
integrates its power from a start as if the driver had loaded days ago. Time
is the clock passed in (the wall clock by default), so the dynamics are per
second whatever the sampling interval. The state is numpy arrays, so one
sample() of 1,000 nodes × 8 GPUs costs milliseconds, not a second.

Jobs
----
Jobs start and stop on aligned blocks of a node's GPUs, as a scheduler packs
them. Each has a Slurm-like job id (increasing from FIRST_JOB_ID), step "0", a
user and a command line; every process on its GPUs (one rank per GPU) carries
them. A job first loads (low utilization, part of its memory), then:

- ``TRAIN``: a whole node or half of one for hours, 92-99 % busy, broken by
  checkpoint (near idle) and evaluation (half busy) dips.
- ``EVAL``: one or two GPUs for a few minutes, 40-70 % busy.
- ``STALLED``: a training job on one or two GPUs whose data loader stalls:
  about 2 minutes "busy", then about 3 minutes at 0-2 %, over and over, for
  hours. Busy is tiny kernels waiting on data: 92-99 % utilization while
  3-9 % of the SMs work ("kernels run, SMs idle"; below the 10 % of
  GPULSE_BUSY_SM_ACTIVITY, so its GPU-hours count as idle). One starts with the
  fleet, on a random node; later ones are rare.
- ``NOTEBOOK``: dana's forgotten Jupyter, open since the fleet started on
  GPU NOTEBOOK_GPU of its first node, holding NOTEBOOK_MEM at 0 % forever
  (until a ``lost`` or ``gpu_missing`` fault kills it).

Activity (gpulse.schema.ACTIVITY_METRICS): each job kind has its SM, tensor
and DRAM activity at full utilization (JobKind.activity), each job a point
within those ranges, and the readings scale with its utilization: training
keeps its tensor pipes half busy, evaluation less, the stalled loader and the
notebook next to nothing; an idle GPU reads 0. Every model reports them, as
DCGM's profiling fields would (through NVML's GPM, only the H100 would).

MIG
---
One node (``mig_node``; none by default, never the notebook's) has H100s in
MIG mode whose instances take MIG_LAYOUTS in turn, reported as the nvml source
reports them (gpulse.schema, "mig"). Each instance runs one job at a time (one
process): ``TRAIN`` (a single-GPU fine-tune), ``EVAL`` or, rarely,
``STALLED``, as the kinds above, within the instance's memory; an idle
instance has no process and reads 0 activity. MIG_BUSY_AT_START of them run
a job when the fleet starts, and the last instance of its first GPU starts as
a stalled loader. The boards have no ``util`` or ``mem_util`` (NVML answers
NOT_SUPPORTED in MIG mode), carry their instances' processes, and draw power,
heat and clock from the sum of their instances' load, each weighted by its
share of the 7 slices, as their activity is; MIG has no NVLink traffic.

Faults
------
The fault names and their syntax are defined once in gpulse/faults.py.
A fault applies to one GPU ("<node>/<gpu>") or to every GPU of a node ("<node>"):

- ``hot``: cooling failure; the temperature climbs to about 94 °C within half
  a minute, with ``sw_thermal_slowdown``, ``hw_thermal_slowdown`` (and
  ``hw_slowdown``) set and the clocks cut.
- ``xid`` or ``xid:<code>``: the GPU reports that Xid (default 48, a
  double-bit ECC error) in every sample while the fault is set.
- ``ecc``: the volatile uncorrected ECC count rises, by one at once and then
  about every ten seconds. Clearing it resets the count to 0, as the GPU reset
  an operator would do.
- ``lost``: the GPU fell off the bus; it stays in the list with
  ``"lost": true`` and every reading null, and the job on it dies.
- ``dead``: the whole node stops reporting (absent from samples), whatever
  GPU the target names.
- ``pcie_degraded``: the GPU's PCIe link trained at x8 of its x16 lanes.
- ``row_remap_pending``: a row was remapped for an uncorrectable error and the
  remap waits for a GPU reset (``remap_pending`` true).
- ``nvlink_down``: one of the GPU's NVLink links is down (``nvlink_links_up``
  one short of ``nvlink_links``); nothing on a GPU without NVLink.
- ``gpu_missing``: the GPU vanished from the bus: it is absent from the node's
  list, as after a reboot that did not find it, and the job on it dies.
- ``ib_down``: the node's last InfiniBand port is DOWN/Polling.
- ``driver_skew``: the node runs another driver version than the fleet.
- ``clear``: no fault. ``inject(node, None, "clear")`` clears the node and all
  of its GPUs.

A healthy GPU reports every health reading (gpulse/schema.py): its model's PCIe
generation at x16, no remapped rows, ECC and persistence on, all NVLink links
up; every node reports the driver and CUDA version and four 400 Gb/s
InfiniBand ports, mlx5_0/1 to mlx5_3/1. These are constant dicts, built again
only when the faults change.

Faults come from ``SimulatedFleet.inject()`` (the collector's ``--fault``) and
from an optional ``fault_reader``, called once per sample(), that returns the
current fault map ``{target: fault}``; where both name a target, the reader
wins. ``redis_fault_reader`` reads that map from the Redis hash
``Keys().simulator_faults`` (``gpulse:simulator:faults`` by default)::

    HSET gpulse:simulator:faults sim-01/3 hot      # GPU 3 of sim-01 overheats
    HSET gpulse:simulator:faults sim-02 dead       # node sim-02 stops reporting
    HDEL gpulse:simulator:faults sim-01/3          # clear that fault

Fields naming nodes this fleet does not have are ignored (several simulated
collectors may share one Redis); malformed entries are logged once and skipped.
"""

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import redis

from gpulse.faults import parse_fault, parse_target
from gpulse.keys import Keys
from gpulse.schema import GPU_METRIC_NAMES, SCHEMA_VERSION
from gpulse.throttle import REASON_BITS, throttle_reasons

log = logging.getLogger(__name__)

MiB = 1024**2
GiB = 1024**3


@dataclass(frozen=True)
class GpuModel:
    name: str  # as NVML's nvmlDeviceGetName reports it
    mem_total: int  # bytes (nvidia-smi memory.total)
    power_limit: float  # W, default enforced limit
    idle_power: float  # W with no context on the GPU
    max_sm_clock: int  # MHz, max boost
    idle_sm_clock: int  # MHz
    mem_clock: int  # MHz
    full_load_temp: float  # °C at the power limit with a 30 °C inlet
    pcie_bw: float  # bytes/s per direction a busy data loader reaches
    nvlink_bw: float | None  # bytes/s per direction over all links; None: no NVLink
    has_fan: bool  # SXM modules and passive PCIe cards report no fan speed
    host_mem_total: int  # bytes of RAM in the typical server for this GPU
    pcie_gen: int  # maximum PCIe generation (at x16)
    nvlink_links: int  # 0: no NVLink
    vbios: str


MODELS = (
    GpuModel("NVIDIA H100 80GB HBM3", 81559 * MiB, 700.0, 70.0, 1980, 345, 2619, 72.0,
             50e9, 450e9, False, 2048 * GiB, 5, 18, "96.00.89.00.01"),
    GpuModel("NVIDIA A100-SXM4-80GB", 81920 * MiB, 400.0, 55.0, 1410, 210, 1593, 68.0,
             25e9, 300e9, False, 1024 * GiB, 4, 12, "92.00.45.00.03"),
    GpuModel("NVIDIA L40S", 46068 * MiB, 350.0, 35.0, 2520, 210, 9001, 74.0,
             25e9, None, False, 512 * GiB, 4, 0, "95.02.66.00.02"),
    GpuModel("NVIDIA RTX 6000 Ada Generation", 49140 * MiB, 300.0, 25.0, 2505, 210, 10001, 78.0,
             25e9, None, True, 256 * GiB, 4, 0, "95.02.5D.00.01"),
)


@dataclass(frozen=True)
class JobKind:
    commands: tuple[str, ...]  # command lines, one drawn per job; the first word is the process name
    duration: tuple[float, float] | None  # s, drawn uniformly; None: until its GPU fails
    startup: tuple[float, float]  # s of loading before the GPUs get busy
    busy_util: tuple[float, float]  # % while busy
    pauses: str | None  # "dips": checkpoints and evaluations; "stalls": the data loader stalls
    # (low, high) SM, tensor and DRAM activity (ratios) at 100 % utilization
    activity: tuple[tuple[float, float], tuple[float, float], tuple[float, float]]


TRAIN = JobKind(("python train.py --config llama-70b.yaml", "python train.py --config llama-8b-sft.yaml",
                 "python train.py --config mixtral-8x7b.yaml", "python train.py --config vit-h14.yaml"),
                (3600, 4 * 3600), (15, 60), (92, 99), "dips", ((0.80, 0.95), (0.35, 0.65), (0.30, 0.60)))
EVAL = JobKind(("python eval.py --checkpoint ckpt/latest --tasks mmlu,gsm8k",
                "python eval.py --checkpoint ckpt/latest --tasks humaneval",
                "python eval.py --checkpoint ckpt/best --tasks hellaswag"),
               (120, 480), (10, 30), (40, 70), None, ((0.55, 0.80), (0.15, 0.35), (0.25, 0.50)))
STALLED = JobKind(("python train.py --config resnet50.yaml --data /nfs/imagenet --num-workers 2",),
                  (3600, 4 * 3600), (15, 60), (92, 99), "stalls", ((0.03, 0.09), (0.0, 0.03), (0.02, 0.06)))
NOTEBOOK = JobKind(("jupyter-lab --no-browser --port 8888",), None, (0, 0), (0, 0), None, ((0, 0), (0, 0), (0, 0)))

USERS = ("alice", "bob", "carol", "dmitri", "eun-ji", "farah", "gustavo", "hiro")
FIRST_JOB_ID = 41000
TRAIN_SHARE = 0.6  # of the jobs started where a whole or half node is free
STALLED_SHARE = 0.02  # of the jobs started: stalled loaders last hours, so a few go a long way
STALL_LENGTH = (150.0, 210.0)  # s at 0-2 % while the loader stalls
STALL_BUSY = (90.0, 150.0)  # s busy between stalls
# The forgotten notebook is always here, so a demo can point at it: the fleet's first node,
# GPU 7 (its last GPU where a node has fewer).
NOTEBOOK_NODE = 0
NOTEBOOK_GPU = 7
NOTEBOOK_USER = "dana"
NOTEBOOK_MEM = 5 * GiB
# Memory the driver keeps on every GPU; a process's share excludes it.
RESERVED_MEM = 512 * MiB
INLET_TEMP_RANGE = (22.0, 30.0)
THERMAL_TAU = 45.0  # s, heat sink time constant
HOT_TEMP = 94.0  # °C a GPU with failed cooling settles at
HOT_TAU = 15.0  # s: failed cooling heats fast enough to watch
SW_THERMAL_TEMP = 85.0
HW_THERMAL_TEMP = 90.0
ECC_ERRORS_PER_SECOND = 0.1
DRIVER = {"driver": "550.54.15", "cuda": "12.4"}
SKEWED_DRIVER = {"driver": "535.183.01", "cuda": "12.2"}
IB_PORTS = tuple(f"mlx5_{i}/1" for i in range(4))
IB_RATE = 400  # Gb/s, NDR
DEGRADED_PCIE_WIDTH = 8

# The activity readings the fleet reports (gpulse.schema.ACTIVITY_METRICS); the others are absent, so null.
ACTIVITY_READINGS = ("sm_active", "tensor_active", "dram_active")


@dataclass(frozen=True)
class MigProfile:
    name: str  # as nvidia-smi -L shows it (gpulse.schema's "profile")
    slices: int  # of the GPU's MIG_SLICES compute slices
    mem_total: int  # bytes, as nvidia-smi -q shows the MIG device's FB memory total


MIG_MODEL = MODELS[0]  # the MIG node's GPUs, whatever model its place in the fleet would give it
MIG_SLICES = 7  # compute slices of an H100
# An H100 80GB HBM3's profiles (nvidia-smi mig -lgip: 9.75, 19.62 and 39.50 GiB).
MIG_1G = MigProfile("1g.10gb", 1, 9984 * MiB)
MIG_2G = MigProfile("2g.20gb", 2, 20096 * MiB)
MIG_3G = MigProfile("3g.40gb", 3, 40448 * MiB)
MIG_4G = MigProfile("4g.40gb", 4, 40448 * MiB)
# The MIG node's GPUs take these layouts in turn: (GPU instance id, profile) of each instance, one compute
# instance (id 0) each, every layout using all 7 slices.
MIG_LAYOUTS = (
    ((1, MIG_3G), (5, MIG_2G), (13, MIG_1G), (14, MIG_1G)),
    ((1, MIG_3G), (5, MIG_2G), (13, MIG_1G), (14, MIG_1G)),
    tuple((gpu_instance, MIG_1G) for gpu_instance in range(7, 14)),
    ((1, MIG_4G), (2, MIG_3G)),
)
# Memory an instance with no process shows used (nvidia-smi: "13MiB / 9984MiB").
MIG_RESERVED_MEM = 13 * MiB
MIG_TRAIN_SHARE = 0.35  # of the jobs started on an instance: single-GPU fine-tunes; the rest evaluations
MIG_BUSY_AT_START = 0.7  # of the instances, running a job when the fleet starts
# Of the jobs found running then: training lasts hours, evaluations minutes, so most running ones train.
MIG_TRAIN_SHARE_AT_START = 0.85
MIG_STALLED_INSTANCE = -1  # the instance of the MIG node's first GPU whose loader stalls from the start
_THERMAL_HW_BITS = REASON_BITS["hw_thermal_slowdown"] | REASON_BITS["hw_slowdown"]
_UUID_NAMESPACE = uuid.UUID("5f1c1a52-3a34-4c1b-9b87-6f0e2f61a7a1")


class RedisFaultReader:
    """Read the fault hash once per call; keep the last known map while Redis is away."""

    RETRY_AFTER = 5.0  # s between attempts while Redis is unreachable, so sampling never waits on it

    def __init__(self, client: redis.Redis, keys: Keys, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.key = keys.simulator_faults
        self.clock = clock
        self.last: dict[str, str] = {}
        self._retry_at = 0.0
        self._failing = False

    def __call__(self) -> dict[str, str]:
        if self._failing and self.clock() < self._retry_at:
            return self.last
        try:
            raw = self.client.hgetall(self.key)
        except redis.RedisError as exc:
            if not self._failing:
                log.warning("cannot read simulator faults from %s (%s); keeping the last known ones", self.key, exc)
            self._failing = True
            self._retry_at = self.clock() + self.RETRY_AFTER
            return self.last
        if self._failing:
            log.info("reading simulator faults from %s again", self.key)
            self._failing = False
        self.last = {_text(field): _text(value) for field, value in raw.items()}
        return self.last


def redis_fault_reader(client: redis.Redis, keys: Keys) -> RedisFaultReader:
    return RedisFaultReader(client, keys)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _MigInstances:
    """The MIG node's instances, all of its GPUs' in one list: where each sits, what it is, what it runs."""

    def __init__(self, node: int, node_name: str, gpus: int, first_slot: int):
        self.node = node
        placed = [(gpu, gpu_instance, profile) for gpu in range(gpus)
                  for gpu_instance, profile in MIG_LAYOUTS[gpu % len(MIG_LAYOUTS)]]
        self.gpu = np.array([gpu for gpu, _, _ in placed])
        # Its share of its GPU: what it adds to the board's load, power and activity.
        self.share = np.array([profile.slices / MIG_SLICES for _, _, profile in placed])
        self.mem_total = np.array([profile.mem_total for _, _, profile in placed], dtype=float)
        self.identity = [{"gpu_instance": gpu_instance, "compute_instance": 0, "profile": profile.name,
                          "uuid": f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/{gpu}/{gpu_instance}')}",
                          "mem_total": profile.mem_total} for gpu, gpu_instance, profile in placed]
        self.by_gpu = [[k for k, (on, _, _) in enumerate(placed) if on == gpu] for gpu in range(gpus)]
        self.first_slot = first_slot  # instance k's job lives in slot first_slot + k
        self.slot = np.full(len(placed), -1, dtype=np.int64)  # -1: no job
        self.processes: list[dict | None] = [None] * len(placed)  # its job's process, without mem_used

    def free(self, gpu_gone: np.ndarray) -> np.ndarray:
        """Which instances can take a job: none running, their GPU on the bus (``gpu_gone``: per GPU)."""
        return (self.slot < 0) & ~gpu_gone[self.gpu]


class SimulatedFleet:
    """The ``simulated`` source: samples for a whole synthetic fleet per call."""

    name = "simulated"

    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        interval: float,
        seed: int | None = None,
        name_prefix: str = "sim-",
        fault_reader: Callable[[], dict[str, str]] | None = None,
        clock: Callable[[], float] = time.time,
        only: Iterable[str] = (),
        without: Iterable[str] = (),
        mig_node: str | None = None,
    ):
        """``only`` and ``without`` choose the nodes this fleet sends samples of (every node by default): the
        demo runs one node as a collector of its own, with that node's own credential, and the rest in one.
        ``mig_node`` names the node whose H100s run MIG instances (none by default; see MIG above)."""
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError("a fleet needs at least one node and one GPU per node")
        self.interval = interval
        self.fault_reader = fault_reader
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        n, g = self.shape = (nodes, gpus_per_node)
        width = max(2, len(str(nodes)))
        self.node_names = [f"{name_prefix}{i + 1:0{width}d}" for i in range(nodes)]
        self._node_index = {name: i for i, name in enumerate(self.node_names)}
        only, without = set(only), set(without)
        unknown = sorted((only | without) - set(self.node_names))
        if unknown:
            raise ValueError(f"the fleet has no node {', '.join(unknown)} (its nodes: {self.node_names[0]} to "
                             f"{self.node_names[-1]})")
        self.published = [name for name in self.node_names if (not only or name in only) and name not in without]
        self._published_index = [self._node_index[name] for name in self.published]
        self.models = [MODELS[i % len(MODELS)] for i in range(nodes)]
        self._mig: _MigInstances | None = None
        if mig_node is not None:
            if mig_node not in self._node_index:
                raise ValueError(f"the fleet has no node {mig_node} to run MIG (its nodes: {self.node_names[0]} to "
                                 f"{self.node_names[-1]})")
            if self._node_index[mig_node] == NOTEBOOK_NODE:
                raise ValueError(f"{mig_node} holds {NOTEBOOK_USER}'s notebook on a whole GPU; choose another node "
                                 "to run MIG")
            self.models[self._node_index[mig_node]] = MIG_MODEL
            self._mig = _MigInstances(self._node_index[mig_node], mig_node, g, first_slot=n * g)
        self._uuids = [[f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{j}')}" for j in range(g)]
                       for node in self.node_names]

        def per_node(attr):
            return np.array([getattr(m, attr) for m in self.models], dtype=float)[:, None]

        self._limit = per_node("power_limit")
        self._idle_power = per_node("idle_power")
        self._max_clock = per_node("max_sm_clock")
        self._idle_clock = per_node("idle_sm_clock")
        self._mem_total = per_node("mem_total")
        self._pcie_bw = per_node("pcie_bw")
        self._nvlink_bw = np.array([m.nvlink_bw or 0.0 for m in self.models])[:, None]
        self._inlet = self.rng.uniform(*INLET_TEMP_RANGE, size=(n, 1))
        # Thermal resistance of each GPU: its model's, varied by its place in the chassis.
        self._thermal_r = (per_node("full_load_temp") - 30.0) / self._limit * self.rng.uniform(0.92, 1.12, (n, g))
        self._power_factor = self.rng.uniform(0.96, 1.04, (n, g))
        self._host_mem_total = per_node("host_mem_total")[:, 0]

        # Jobs live in slots: slot = node * G + first GPU, so a slot never holds two jobs; the MIG node's
        # instances' jobs in the slots after those, one per instance.
        slots = n * g + (0 if self._mig is None else len(self._mig.gpu))
        self._gpu_slot = np.full((n, g), -1, dtype=np.int64)
        self._job_active = np.zeros(slots, dtype=bool)
        self._job_width = np.zeros(slots, dtype=np.int64)
        self._job_end = np.zeros(slots)
        self._job_startup_end = np.zeros(slots)
        self._job_next_dip = np.zeros(slots)
        self._job_dip_end = np.zeros(slots)
        self._job_dip_util = np.zeros(slots)
        self._job_busy_util = np.zeros(slots)
        self._job_power = np.zeros(slots)
        self._job_mem_frac = np.zeros(slots)
        self._job_mem_util = np.zeros(slots)
        self._job_pcie = np.zeros(slots)
        self._job_nvlink = np.zeros(slots)
        self._job_stalls = np.zeros(slots, dtype=bool)
        self._job_activity = np.zeros((3, slots))  # SM, tensor, DRAM activity at 100 % utilization
        self._node_next_job = np.zeros(n)
        self._next_job_id = FIRST_JOB_ID
        # Per GPU, the process its job runs there without mem_used (None: no job): fixed for the
        # job's life, so _render only adds the memory.
        self._processes: list[list[dict | None]] = [[None] * g for _ in range(n)]

        self._temp = np.zeros((n, g))
        # mJ since the driver loaded, as NVML counts it: 2-40 days ago, at 40-80 % of the power limit on average.
        uptime = self.rng.uniform(2, 40, (n, 1)) * 86_400
        self._energy = uptime * self._limit * self.rng.uniform(0.4, 0.8, (n, g)) * 1000.0
        self._warm = False
        self._ecc_count = np.zeros((n, g), dtype=np.int64)

        self._injected: dict[tuple[str, int | None], str] = {}
        self._fault_map: dict[tuple[str, int | None], str] | None = None
        self._reported_bad: set[tuple[str, str]] = set()
        self._hot = np.zeros((n, g), dtype=bool)
        self._ecc = np.zeros((n, g), dtype=bool)
        self._lost = np.zeros((n, g), dtype=bool)
        self._missing = np.zeros((n, g), dtype=bool)
        self._xid = np.zeros((n, g), dtype=np.int64)
        self._dead = np.zeros(n, dtype=bool)
        self._constants: list[list[dict | None]] = []  # built with the faults, by _build_constants
        self._system: list[dict] = []
        self._ib: list[list[dict]] = []

        self._last_t = self.clock()
        self._start_initial_jobs(self._last_t)

    # ---- faults -----------------------------------------------------------------

    def inject(self, node: str, gpu: int | None, fault: str) -> None:
        """Set ``fault`` on one GPU (or the whole node when gpu is None); raise ValueError on a bad one."""
        name, _ = parse_fault(fault)
        if node not in self._node_index:
            raise ValueError(f"no node {node!r} in this fleet ({self.node_names[0]} .. {self.node_names[-1]})")
        if gpu is not None and not 0 <= gpu < self.shape[1]:
            raise ValueError(f"{node} has GPUs 0..{self.shape[1] - 1}, not {gpu}")
        if name == "clear":
            for target in [t for t in self._injected if t[0] == node and (gpu is None or t[1] == gpu)]:
                del self._injected[target]
        else:
            self._injected[(node, gpu)] = fault.strip().lower()

    def _read_faults(self) -> dict[tuple[str, int | None], str]:
        merged = dict(self._injected)
        if self.fault_reader is not None:
            bad = set()
            for target_text, fault in self.fault_reader().items():
                try:
                    node, gpu = parse_target(target_text)
                    parse_fault(fault)
                    if node in self._node_index and gpu is not None and gpu >= self.shape[1]:
                        raise ValueError(f"{node} has GPUs 0..{self.shape[1] - 1}")
                except ValueError as exc:
                    bad.add((target_text, fault))
                    if (target_text, fault) not in self._reported_bad:
                        log.warning("ignoring simulator fault %s=%s: %s", target_text, fault, exc)
                    continue
                if node in self._node_index:
                    merged[(node, gpu)] = fault.strip().lower()
            self._reported_bad = bad
        return {target: fault for target, fault in merged.items() if fault != "clear"}

    def _apply_faults(self, now: float) -> None:
        fault_map = self._read_faults()
        if fault_map == self._fault_map:
            return
        self._fault_map = fault_map
        per_gpu = {name: np.zeros(self.shape, dtype=bool) for name in _GPU_FLAG_FAULTS}
        per_node = {name: np.zeros(self.shape[0], dtype=bool) for name in ("dead", *_NODE_READING_FAULTS)}
        xid = np.zeros(self.shape, dtype=np.int64)
        for (node, gpu), fault in fault_map.items():
            i = self._node_index[node]
            where = (i, slice(None)) if gpu is None else (i, gpu)
            name, code = parse_fault(fault)
            if name in per_node:
                per_node[name][i] = True
            elif name == "xid":
                xid[where] = code
            else:
                per_gpu[name][where] = True
        ecc, lost, missing = per_gpu["ecc"], per_gpu["lost"], per_gpu["gpu_missing"]
        self._ecc_count[self._ecc & ~ecc] = 0
        self._ecc_count[ecc & ~self._ecc] += 1
        gone = (lost | missing) & ~(self._lost | self._missing)
        for slot in np.unique(self._gpu_slot[gone]):
            if slot >= 0:
                self._end_job(int(slot), now)
        if self._mig is not None:
            for slot in self._mig.slot[gone[self._mig.node][self._mig.gpu]]:
                if slot >= 0:
                    self._end_job(int(slot), now)
        self._hot, self._ecc, self._lost, self._missing, self._xid = per_gpu["hot"], ecc, lost, missing, xid
        self._dead = per_node["dead"]
        self._build_constants(per_gpu, per_node)

    def _build_constants(self, per_gpu: dict[str, np.ndarray], per_node: dict[str, np.ndarray]) -> None:
        """What only faults change: each GPU's identity, limits and health readings (None: missing from
        the bus), each node's system and ib. _render copies a GPU's, which is cheaper than listing them."""
        healthy = {model: _healthy_readings(model) for model in MODELS}
        ports = [{"port": port, "state": "ACTIVE", "phys_state": "LinkUp", "rate": IB_RATE,
                  "symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0} for port in IB_PORTS]
        port_down = [*ports[:-1], {**ports[-1], "state": "DOWN", "phys_state": "Polling"}]
        # Plain lists: indexing numpy arrays one element at a time is slow.
        faulty = {name: per_gpu[name].tolist() for name in _READING_FAULTS}
        missing, skewed, ib_down = per_gpu["gpu_missing"].tolist(), per_node["driver_skew"], per_node["ib_down"]
        self._constants, self._system, self._ib = [], [], []
        for i, model in enumerate(self.models):
            constants: list[dict | None] = []
            for j in range(self.shape[1]):
                if missing[i][j]:
                    constants.append(None)
                    continue
                gpu = {"index": j, "uuid": self._uuids[i][j], "name": model.name, "lost": False,
                       "mem_total": model.mem_total, "power_limit": model.power_limit, "mem_clock": model.mem_clock,
                       **healthy[model]}
                if self._mig is not None and i == self._mig.node:
                    gpu["mig_enabled"] = True
                for name, where in faulty.items():
                    if where[i][j]:
                        gpu.update(_READING_FAULTS[name](model))
                constants.append(gpu)
            self._constants.append(constants)
            self._system.append(SKEWED_DRIVER if skewed[i] else DRIVER)
            self._ib.append(port_down if ib_down[i] else ports)

    # ---- jobs -------------------------------------------------------------------

    def _start_initial_jobs(self, now: float) -> None:
        """Begin mid-run: most nodes training; dana's notebook and a stalled loader starting with the fleet."""
        n, g = self.shape
        notebook = self._start_job(NOTEBOOK_NODE, min(NOTEBOOK_GPU, g - 1), 1, NOTEBOOK, now, user=NOTEBOOK_USER)
        self._job_mem_frac[notebook] = NOTEBOOK_MEM / self._mem_total[NOTEBOOK_NODE, 0]
        # Fresh, so every fleet shows a stalling loader for its first hour at least.
        self._schedule_job(int(self.rng.integers(n)), now, STALLED)
        mig = self._mig
        if mig is not None and mig.slot[mig.by_gpu[0][MIG_STALLED_INSTANCE]] < 0:
            self._start_instance_job(mig, mig.by_gpu[0][MIG_STALLED_INSTANCE], STALLED, now)
        for i in range(n):
            if mig is not None and i == mig.node:
                for instance in np.flatnonzero(mig.slot < 0):
                    if self.rng.random() < MIG_BUSY_AT_START:
                        kind = self._instance_job_kind(MIG_TRAIN_SHARE_AT_START)
                        self._start_instance_job(mig, int(instance), kind, now, mid_run=True)
            else:
                for _ in range(3):  # a whole node's job, or a few smaller ones
                    if self.rng.random() < 0.8:
                        self._schedule_job(i, now, mid_run=True)
            self._node_next_job[i] = now + self.rng.uniform(10, 300)

    def _schedule_job(self, node: int, now: float, kind: JobKind | None = None, mid_run: bool = False) -> None:
        """Start a job of ``kind`` (None: drawn) on the node's free GPUs, if a block it asks for is free."""
        if self._mig is not None and node == self._mig.node:
            self._schedule_instance_job(self._mig, now, kind, mid_run)
            return
        g, rng = self.shape[1], self.rng
        free = (self._gpu_slot[node] < 0) & ~self._lost[node] & ~self._missing[node]
        # The first free aligned block of each width, as a scheduler packs GPUs: whole node, halves, pairs, singles.
        blocks = {}
        for width in sorted({w for w in (g, g // 2, 2, 1) if 1 <= w <= g}, reverse=True):
            for first in range(0, g - width + 1, width):
                if free[first:first + width].all():
                    blocks[width] = first
                    break
        big = [width for width in blocks if 2 * width >= g]
        if kind is None:
            draw = rng.random()
            kind = TRAIN if big and draw < TRAIN_SHARE else STALLED if draw >= 1 - STALLED_SHARE else EVAL
        widths = big if kind is TRAIN else [width for width in blocks if width <= 2]
        if not widths:
            return
        weights = np.array([3.0 if width == g else 1.0 for width in widths])
        width = widths[rng.choice(len(widths), p=weights / weights.sum())]
        self._start_job(node, blocks[width], width, kind, now, mid_run=mid_run)

    def _start_job(self, node: int, first: int, width: int, kind: JobKind, now: float,
                   user: str | None = None, mid_run: bool = False) -> int:
        slot = node * self.shape[1] + first
        process, pid = self._begin_job(slot, width, kind, now, user, mid_run)
        self._gpu_slot[node, first:first + width] = slot
        # One rank per GPU, as torchrun starts them.
        for rank in range(width):
            self._processes[node][first + rank] = {"pid": pid + rank, **process}
        return slot

    def _begin_job(self, slot: int, width: int, kind: JobKind, now: float, user: str | None,
                   mid_run: bool) -> tuple[dict, int]:
        """Draw a job of ``kind`` into ``slot``; return its processes' identity and its first pid."""
        rng = self.rng
        duration = rng.uniform(*kind.duration) if kind.duration else np.inf
        # A job found running when the fleet starts has done part of its run.
        begun = now - rng.uniform(0.05, 0.95) * duration if mid_run else now
        self._job_active[slot] = True
        self._job_width[slot] = width
        self._job_startup_end[slot] = begun + rng.uniform(*kind.startup)
        self._job_end[slot] = begun + duration
        self._job_dip_end[slot] = 0.0
        self._job_stalls[slot] = kind.pauses == "stalls"
        busy_stretch = {"dips": (60.0, 400.0), "stalls": STALL_BUSY}.get(kind.pauses or "")
        self._job_next_dip[slot] = (max(self._job_startup_end[slot], now) + rng.uniform(*busy_stretch)
                                    if busy_stretch else np.inf)
        self._job_busy_util[slot] = rng.uniform(*kind.busy_util)
        # Above 1, the job wants more power than the limit allows: it runs power-capped.
        self._job_power[slot] = rng.uniform(0.75, 1.2)
        # Where within its kind's activity ranges: a job that draws more power works its units harder.
        # Derived, not drawn, so the fleet's random sequence (and every seeded test) stays as it was.
        within = (self._job_power[slot] - 0.75) / 0.45
        self._job_activity[:, slot] = [low + (high - low) * within for low, high in kind.activity]
        self._job_mem_frac[slot] = rng.uniform(0.45, 0.95)
        self._job_mem_util[slot] = rng.uniform(0.3, 0.8)
        self._job_pcie[slot] = rng.uniform(0.02, 0.15)
        self._job_nvlink[slot] = rng.uniform(0.05, 0.4) if width > 1 else 0.0
        cmd = kind.commands[rng.integers(len(kind.commands))]
        process = {"name": cmd.split()[0], "user": user or USERS[rng.integers(len(USERS))],
                   "job": str(self._next_job_id), "step": "0", "cmd": cmd}
        self._next_job_id += 1
        return process, int(rng.integers(2_000, 4_000_000))

    def _end_job(self, slot: int, now: float) -> None:
        self._job_active[slot] = False
        if self._mig is not None and slot >= self._mig.first_slot:
            instance = slot - self._mig.first_slot
            self._mig.slot[instance] = -1
            self._mig.processes[instance] = None
            # Many small instances: the next job comes sooner than to a node's freed GPUs.
            node = self._mig.node
            self._node_next_job[node] = max(self._node_next_job[node], now + self.rng.uniform(10, 120))
            return
        node, first = divmod(slot, self.shape[1])
        width = int(self._job_width[slot])
        self._gpu_slot[node, first:first + width] = -1
        self._processes[node][first:first + width] = [None] * width
        self._node_next_job[node] = max(self._node_next_job[node], now + self.rng.uniform(30, 900))

    def _schedule_instance_job(self, mig: _MigInstances, now: float, kind: JobKind | None, mid_run: bool) -> None:
        """Start a job of ``kind`` (None: drawn) on a free MIG instance, if one is free: one process each."""
        free = np.flatnonzero(mig.free(self._lost[mig.node] | self._missing[mig.node]))
        if not free.size:
            return
        instance = int(free[self.rng.integers(free.size)])
        self._start_instance_job(mig, instance, self._instance_job_kind() if kind is None else kind, now, mid_run)

    def _instance_job_kind(self, train_share: float = MIG_TRAIN_SHARE) -> JobKind:
        draw = self.rng.random()
        return TRAIN if draw < train_share else STALLED if draw >= 1 - STALLED_SHARE else EVAL

    def _start_instance_job(self, mig: _MigInstances, instance: int, kind: JobKind, now: float,
                            mid_run: bool = False) -> None:
        slot = mig.first_slot + instance
        process, pid = self._begin_job(slot, 1, kind, now, None, mid_run)
        mig.slot[instance] = slot
        mig.processes[instance] = {"pid": pid, **process}

    def _schedule(self, now: float) -> None:
        for slot in np.flatnonzero(self._job_active & (self._job_end <= now)):
            self._end_job(int(slot), now)
        usable = ~self._lost & ~self._missing
        free = (self._gpu_slot < 0) & usable
        if self._mig is not None:  # its GPUs take no whole-GPU job: it is free while an instance is
            free[self._mig.node] = self._mig.free(~usable[self._mig.node]).any()
        for node in np.flatnonzero(free.any(axis=1) & (self._node_next_job <= now)):
            self._schedule_job(int(node), now)
            self._node_next_job[node] = now + self.rng.uniform(10, 300)
        # Pauses of the running jobs: a training job's checkpoint (near idle) and evaluation (half
        # busy) dips, a stalled loader's minutes at 0-2 %.
        pause = self._job_active & (now >= self._job_next_dip) & (now >= self._job_startup_end)
        count = int(pause.sum())
        if count:
            rng = self.rng
            stall = self._job_stalls[pause]
            length = np.where(stall, rng.uniform(*STALL_LENGTH, count), rng.uniform(8, 40, count))
            checkpoint = rng.random(count) < 0.5
            self._job_dip_end[pause] = now + length
            self._job_dip_util[pause] = np.where(stall, rng.uniform(0, 1.5, count),
                                                 np.where(checkpoint, rng.uniform(0, 12, count),
                                                          rng.uniform(35, 70, count)))
            self._job_next_dip[pause] = now + np.where(stall, length + rng.uniform(*STALL_BUSY, count),
                                                       rng.uniform(120, 600, count))

    # ---- sampling ---------------------------------------------------------------

    def sample(self) -> list[dict]:
        now = self.clock()
        dt = max(0.0, now - self._last_t)
        self._last_t = now
        self._apply_faults(now)
        self._schedule(now)
        return self._render(now, *self._step(now, dt))

    def _step(self, now: float, dt: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
        """Advance the physics by dt seconds; return this step's readings as arrays, and the MIG instances'
        (None: no MIG node)."""
        rng, shape = self.rng, self.shape
        slot_of = self._gpu_slot
        active = slot_of >= 0
        slot = np.where(active, slot_of, 0)
        noise = rng.standard_normal((4, *shape))
        util, startup = self._utilization(now, slot, active, noise[0])
        load = util / 100.0

        mem_used = self._job_memory(slot, active, startup, self._mem_total, RESERVED_MEM)
        mem_util = np.clip(np.rint(util * self._job_mem_util[slot] * (1.0 + 0.05 * noise[1])), 0, 100)
        power_draw = np.where(active, self._job_power[slot], 1.0)  # of the power limit, at full load
        loading = np.where(startup, 0.4, self._job_pcie[slot] * load)  # of the PCIe bandwidth, at full load
        collective = np.where(active & ~startup, self._nvlink_bw * self._job_nvlink[slot] * load, 0.0)
        # Loading runs no tensor math yet; an idle GPU reads 0 (its load is 0).
        activity = np.round(self._job_activity[:, slot] * load, 3)
        activity[1][startup] = 0.0

        instances = None
        if self._mig is not None:
            # The MIG node's boards carry the sum of their instances' work; NVLink idles (MIG has no peer access).
            instances = self._instance_step(self._mig, now)
            m = self._mig.node
            active[m], load[m], power_draw[m] = instances["gpu_active"], instances["gpu_load"], instances["gpu_draw"]
            mem_used[m] = np.minimum(RESERVED_MEM + instances["gpu_mem_used"], self._mem_total[m])
            loading[m], collective[m], activity[:, m] = instances["gpu_loading"], 0.0, instances["gpu_activity"]

        peak = self._limit * power_draw * self._power_factor
        demand = self._idle_power * self._power_factor + (peak - self._idle_power) * load + noise[2]
        capped = demand >= self._limit * 0.995
        # A capped board hovers just under its limit, never above it.
        power = np.where(capped, self._limit * rng.uniform(0.975, 0.995, shape),
                         np.clip(demand, 0.5 * self._idle_power, self._limit))

        steady = np.where(self._hot, HOT_TEMP + 0.7 * noise[3], self._inlet + self._thermal_r * power)
        if self._warm:
            tau = np.where(self._hot, HOT_TAU, THERMAL_TAU)
            self._temp += (steady - self._temp) * -np.expm1(-dt / tau)
        else:
            self._temp = steady.copy()
            self._warm = True
        temp = np.rint(self._temp)

        sw_thermal = temp >= SW_THERMAL_TEMP
        hw_thermal = temp >= HW_THERMAL_TEMP
        # Under the cap the clock drops at least one 15 MHz bin, more the harder the job pushes.
        clock = np.where(capped, self._max_clock * np.clip(self._limit / demand, 0.7, 0.99), self._max_clock)
        thermal_factor = np.where(hw_thermal, 0.6, np.where(sw_thermal, 0.85, 1.0))
        clock = np.where(active, clock * thermal_factor, self._idle_clock)
        clock = np.floor(clock / 15.0) * 15.0
        power = np.maximum(power * thermal_factor, np.minimum(power, self._idle_power))
        self._energy += power * (dt * 1000.0)  # W × s = J; the counter is in mJ

        throttle = (np.where(~active, REASON_BITS["gpu_idle"], 0)
                    | np.where(capped & active, REASON_BITS["sw_power_cap"], 0)
                    | np.where(sw_thermal, REASON_BITS["sw_thermal_slowdown"], 0)
                    | np.where(hw_thermal, _THERMAL_HW_BITS, 0))

        jitter = rng.uniform(0.85, 1.15, (4, *shape))
        pcie_rx = np.where(active, self._pcie_bw * loading * jitter[0], rng.uniform(0, 3e5, shape))
        pcie_tx = np.where(active, self._pcie_bw * loading * 0.25 * jitter[1], rng.uniform(0, 1e5, shape))
        sm_active, tensor_active, dram_active = activity

        if self._ecc.any():
            self._ecc_count += self._ecc & (rng.random(shape) < ECC_ERRORS_PER_SECOND * dt)

        active_share = active.mean(axis=1)
        whole = {
            "util": util, "mem_util": mem_util, "mem_used": mem_used, "temp": temp, "sm_clock": clock,
            "fan": np.clip(np.rint(30 + (temp - 35) * 1.4), 30, 100),
            "pcie_tx": np.rint(pcie_tx), "pcie_rx": np.rint(pcie_rx),
            "nvlink_tx": np.rint(collective * jitter[2]), "nvlink_rx": np.rint(collective * jitter[3]),
        }
        readings = {name: array.astype(np.int64) for name, array in whole.items()}
        readings.update({
            "power": np.round(power, 1), "throttle": throttle, "energy": self._energy.astype(np.int64),
            "sm_active": sm_active, "tensor_active": tensor_active, "dram_active": dram_active,
            "ecc": self._ecc_count, "xid": self._xid, "lost": self._lost,
            "cpu_util": np.round(np.clip(3 + 55 * active_share + rng.normal(0, 2, shape[0]), 0, 100), 1),
            "host_mem": np.rint(self._host_mem_total * (0.05 + 0.45 * active_share)),
        })
        return readings, instances

    def _utilization(self, now: float, slot: np.ndarray, active: np.ndarray,
                     noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The utilization (%) of the jobs in ``slot`` where ``active``, and which of them are still loading."""
        startup = active & (now < self._job_startup_end[slot])
        in_dip = active & ~startup & (now < self._job_dip_end[slot])
        # Noise in proportion to the level, so a stalled loader stays at 0-2 % and an idle notebook at 0.
        level = np.where(in_dip, self._job_dip_util[slot], self._job_busy_util[slot])
        target = np.where(startup, 25.0 + 8.0 * noise, level * (1.0 + np.where(in_dip, 0.1, 0.03) * noise))
        return np.where(active, np.clip(np.rint(target), 0, 100), 0.0), startup

    def _job_memory(self, slot: np.ndarray, active: np.ndarray, startup: np.ndarray, total: np.ndarray,
                    reserved: int) -> np.ndarray:
        """Memory used (bytes) of devices of ``total`` bytes: ``reserved``, and the job's while one runs
        (a part of it while loading)."""
        job_mem = np.floor(self._job_mem_frac[slot] * np.where(startup, 0.3, 1.0) * total / MiB) * MiB
        return np.minimum(np.where(active, reserved + job_mem, reserved), total)

    def _instance_step(self, mig: _MigInstances, now: float) -> dict[str, np.ndarray]:
        """The MIG instances' memory and activity, and what they add up to on each of their GPUs."""
        active = mig.slot >= 0
        slot = np.where(active, mig.slot, 0)
        util, startup = self._utilization(now, slot, active, self.rng.standard_normal(active.size))
        load = util / 100.0
        mem_used = self._job_memory(slot, active, startup, mig.mem_total, MIG_RESERVED_MEM)
        activity = np.round(self._job_activity[:, slot] * load, 3)
        activity[1][startup] = 0.0

        def per_gpu(values: np.ndarray) -> np.ndarray:
            return np.bincount(mig.gpu, weights=values, minlength=self.shape[1])

        board_load = per_gpu(mig.share * load)
        return {
            "mem_used": mem_used.astype(np.int64), "activity": activity,
            "gpu_active": per_gpu(active.astype(float)) > 0,
            "gpu_load": board_load,
            # The jobs' power draw, weighted by the load each puts on the board.
            "gpu_draw": np.where(board_load > 0, per_gpu(mig.share * load * self._job_power[slot])
                                 / np.maximum(board_load, 1e-9), 1.0),
            "gpu_mem_used": per_gpu(mem_used),
            "gpu_loading": per_gpu(mig.share * np.where(startup, 0.4, self._job_pcie[slot] * load)),
            "gpu_activity": np.round(np.stack([per_gpu(mig.share * row) for row in activity]), 3),
        }

    def _render(self, now: float, r: dict[str, np.ndarray], instances: dict[str, np.ndarray] | None) -> list[dict]:
        """Turn the arrays into version-1 samples.

        Whole arrays become lists first and each node's columns are zipped: per-GPU
        numpy indexing would cost more than all of the physics.
        """
        columns = [r[name].tolist() for name in _COLUMNS]
        cpu_util, host_mem = r["cpu_util"].tolist(), r["host_mem"].astype(np.int64).tolist()
        nulls = [None] * self.shape[1]
        mig = self._mig
        samples = []
        for i in self._published_index:
            node = self.node_names[i]
            if self._dead[i]:
                continue
            model = self.models[i]
            row = [column[i] for column in columns]
            if not model.has_fan:
                row[6] = nulls
            if model.nvlink_bw is None:
                row[12] = row[13] = nulls
            gpus = []
            for (constants, process, util, mem_util, mem_used, temp, power, clock, fan, throttle, ecc, xid,
                 pcie_tx, pcie_rx, nvlink_tx, nvlink_rx, energy, sm_active, tensor_active, dram_active, lost) in zip(
                    self._constants[i], self._processes[i], *row, strict=False):
                if constants is None:
                    continue  # gpu_missing: gone from the bus
                if lost:
                    gpus.append(_lost_gpu(constants["index"], constants["uuid"], model.name))
                    continue
                gpus.append({
                    **constants, "util": util, "mem_util": mem_util, "mem_used": mem_used, "temp": temp,
                    "power": power, "sm_clock": clock, "fan": fan, "throttle": list(_THROTTLE_NAMES[throttle]),
                    "ecc_uncorrected": ecc, "xid": [xid] if xid else [],
                    "pcie_tx": pcie_tx, "pcie_rx": pcie_rx, "nvlink_tx": nvlink_tx, "nvlink_rx": nvlink_rx,
                    "energy": energy,
                    "sm_active": sm_active, "tensor_active": tensor_active, "dram_active": dram_active,
                    # the GPU's one process has all of its utilization (nvml: nvmlDeviceGetProcessUtilization)
                    "processes": [] if process is None else [{**process, "mem_used": mem_used - RESERVED_MEM,
                                                              "sm_util": util, "mem_util": mem_util}],
                })
            if mig is not None and instances is not None and i == mig.node:
                self._add_instances(mig, gpus, instances)
            samples.append({
                "v": SCHEMA_VERSION, "node": node, "ts": now, "interval": self.interval, "gpus": gpus,
                "host": {"cpu_util": cpu_util[i], "mem_used": host_mem[i], "mem_total": model.host_mem_total},
                "system": self._system[i], "ib": self._ib[i],
            })
        return samples

    @staticmethod
    def _add_instances(mig: _MigInstances, gpus: list[dict], readings: dict[str, np.ndarray]) -> None:
        """Give the MIG node's GPUs their instances, as the nvml source reports a GPU in MIG mode: no util
        (NVML answers NOT_SUPPORTED), and the instances' processes as the GPU's."""
        mem_used = readings["mem_used"].tolist()
        activity = [dict(zip(ACTIVITY_READINGS, values, strict=True)) for values in readings["activity"].T.tolist()]
        for gpu in gpus:
            if gpu["lost"]:
                continue
            instances = []
            for k in mig.by_gpu[gpu["index"]]:
                process = mig.processes[k]
                instances.append({
                    **mig.identity[k], "mem_used": mem_used[k], **activity[k],
                    "processes": [] if process is None else [{**process, "mem_used": mem_used[k] - MIG_RESERVED_MEM}],
                })
            gpu.update(util=None, mem_util=None, mig=instances,
                       processes=[process for instance in instances for process in instance["processes"]])

    def close(self) -> None:
        """Nothing to release: the fleet is in memory."""


# _step's per-GPU arrays in the order _render unpacks them.
_COLUMNS = ("util", "mem_util", "mem_used", "temp", "power", "sm_clock", "fan", "throttle", "ecc", "xid",
            "pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx", "energy", "sm_active", "tensor_active", "dram_active",
            "lost")

# Faults that set a flag per GPU; "xid" carries a code and the node faults set one per node.
_GPU_FLAG_FAULTS = ("hot", "ecc", "lost", "gpu_missing", "pcie_degraded", "row_remap_pending", "nvlink_down")
_NODE_READING_FAULTS = ("ib_down", "driver_skew")


def _healthy_readings(model: GpuModel) -> dict:
    """The health readings of a healthy GPU of ``model``, as NVML reports them."""
    return {
        "pcie_gen": model.pcie_gen, "pcie_gen_max": model.pcie_gen, "pcie_width": 16, "pcie_width_max": 16,
        "pcie_replay": 0, "remapped_correctable": 0, "remapped_uncorrectable": 0,
        "remap_pending": False, "remap_failure": False,
        # GPUs with row remapping (all of MODELS) report no page retirement: nvidia-smi shows N/A.
        "retired_pages": None, "retired_pending": None,
        "ecc_enabled": True, "ecc_pending": False, "persistence": True, "mig_enabled": False, "mig_pending": False,
        "nvlink_links": model.nvlink_links, "nvlink_links_up": model.nvlink_links,
        "nvlink_errors": 0 if model.nvlink_links else None,
        "vbios": model.vbios, "compute_mode": "Default",
    }


# Everything but identity is unknown once a GPU is off the bus.
_READINGS = (*GPU_METRIC_NAMES, "energy", *ACTIVITY_READINGS, "throttle", "xid", "processes",
             *_healthy_readings(MODELS[0]))

# What each GPU fault that changes health readings changes.
_READING_FAULTS = {
    "pcie_degraded": lambda model: {"pcie_width": DEGRADED_PCIE_WIDTH},
    "row_remap_pending": lambda model: {"remap_pending": True, "remapped_uncorrectable": 1},
    "nvlink_down": lambda model: {"nvlink_links_up": model.nvlink_links - 1} if model.nvlink_links else {},
}


def _lost_gpu(index: int, gpu_uuid: str, name: str) -> dict:
    gpu = {"index": index, "uuid": gpu_uuid, "name": name, "lost": True}
    gpu.update(dict.fromkeys(_READINGS))
    return gpu


class _ThrottleNames(dict):
    """Mask → reason names, built on first use of each mask (a handful ever occur)."""

    def __missing__(self, mask: int) -> tuple[str, ...]:
        names = tuple(throttle_reasons(mask))
        self[mask] = names
        return names


_THROTTLE_NAMES = _ThrottleNames()
