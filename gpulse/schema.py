"""Telemetry sample, version 1: the one format every source produces.

Units: bytes, bytes/s, W, °C, MHz, %, mJ, and ratios 0-1 for the GPM activity
readings (ACTIVITY_METRICS), as DCGM gives them. A metric the GPU does not support is
None (JSON null), never 0. A GPU that fell off the bus stays in the list with
``lost: True`` and every reading None.

validate() is the one check of this contract, used by everything that reads
samples (ingest, the web's node keys, /metrics): a structural problem rejects
the entry; a reading outside its Metric range (or NaN) becomes None and is
counted. Exact-type checks and plain loops: it runs for every GPU every second.

read() first tries a faster gate (msgspec, in C) that only lets through an entry
validate() would pass unchanged; anything else, it leaves to validate(). Both
drop fields the contract does not name (an untrusted node's extra data goes no
further than the parser).
"""

import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Annotated, Literal, Required, TypedDict

import msgspec
import orjson

from gpulse.health import CHECK_IDS, FINDING_STATUSES
from gpulse.ratelog import RateLimitedLog
from gpulse.throttle import THROTTLE_REASONS

SCHEMA_VERSION = 1
# A node's malformed "mig" list is dropped, not its sample: why, at most a few lines a minute.
_mig_dropped = RateLimitedLog(logging.getLogger(__name__))


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str
    low: float  # the plausible range: a reading outside it (or NaN) becomes null and is counted
    high: float


PB = 1e15
# One line per numeric GPU reading; display, export and validation all read it.
GPU_METRICS = (
    Metric("util", "%", "GPU utilization (nvidia-smi: utilization.gpu)", 0, 100),
    Metric("mem_util", "%", "memory controller utilization (utilization.memory)", 0, 100),
    Metric("mem_used", "bytes", "framebuffer memory used (memory.used)", 0, PB),
    Metric("mem_total", "bytes", "framebuffer memory total (memory.total)", 0, PB),
    Metric("temp", "°C", "GPU core temperature (temperature.gpu)", -40, 150),
    Metric("power", "W", "board power draw (power.draw)", 0, 5000),
    Metric("power_limit", "W", "enforced power limit (enforced.power.limit)", 0, 5000),
    Metric("sm_clock", "MHz", "SM clock (clocks.sm)", 0, 10_000),
    # GDDR boards report the effective data rate: 10,501 MHz on an RTX 4090.
    Metric("mem_clock", "MHz", "memory clock (clocks.mem)", 0, 20_000),
    Metric("fan", "%", "fan speed (fan.speed); null on passively cooled boards", 0, 100),
    Metric("ecc_uncorrected", "count", "volatile uncorrected ECC errors (ecc.errors.uncorrected.volatile.total)",
           0, 2**53),
    # The same quantities as GPM's PCIE_TX/RX_PER_SEC and NVLINK_TOTAL_TX/RX_PER_SEC and DCGM's
    # DCGM_FI_PROF_PCIE_TX/RX_BYTES and DCGM_FI_PROF_NVLINK_TX/RX_BYTES: one reading each, whichever
    # source gave it, so the activity readings below add no PCIe or NVLink fields of their own.
    Metric("pcie_tx", "bytes/s", "PCIe transmit throughput (nvidia-smi dmon -s t: txpci)", 0, 1e13),
    Metric("pcie_rx", "bytes/s", "PCIe receive throughput (nvidia-smi dmon -s t: rxpci)", 0, 1e13),
    Metric("nvlink_tx", "bytes/s", "NVLink transmit throughput, all links (DCGM_FI_PROF_NVLINK_TX_BYTES)", 0, 1e13),
    Metric("nvlink_rx", "bytes/s", "NVLink receive throughput, all links (DCGM_FI_PROF_NVLINK_RX_BYTES)", 0, 1e13),
)
GPU_METRIC_NAMES = tuple(m.name for m in GPU_METRICS)
# What the GPU's units did over the last interval, where util only says a kernel ran: NVML's GPU
# Performance Monitoring (GPM, Hopper and newer; nvidia-smi dmon --gpm-metrics N shows metric N) or
# DCGM's profiling fields. Ratios 0-1 of time or cycles, as DCGM gives them (NVML's GPM gives 0-100,
# the nvml source divides). Null where neither is supported (before Hopper through NVML), never 0.
ACTIVITY_METRICS = (
    Metric("gr_active", "ratio", "graphics engine active: any graphics or compute context "
           "(DCGM_FI_PROF_GR_ENGINE_ACTIVE; GPM metric 1, GRAPHICS_UTIL)", 0, 1),
    Metric("sm_active", "ratio", "SMs with at least one warp resident, averaged over the SMs "
           "(DCGM_FI_PROF_SM_ACTIVE; GPM 2, SM_UTIL)", 0, 1),
    Metric("sm_occupancy", "ratio", "warps resident over the SMs' maximum "
           "(DCGM_FI_PROF_SM_OCCUPANCY; GPM 3, SM_OCCUPANCY)", 0, 1),
    Metric("tensor_active", "ratio", "any tensor pipe active "
           "(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE; GPM 5, ANY_TENSOR_UTIL)", 0, 1),
    Metric("tensor_hmma_active", "ratio", "half-precision tensor (HMMA) pipe active "
           "(DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE; GPM 7)", 0, 1),
    Metric("tensor_imma_active", "ratio", "integer tensor (IMMA) pipe active "
           "(DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE; GPM 9)", 0, 1),
    Metric("tensor_dmma_active", "ratio", "FP64 tensor (DMMA) pipe active "
           "(DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE; GPM 8)", 0, 1),
    Metric("dram_active", "ratio", "device memory bandwidth used over its peak "
           "(DCGM_FI_PROF_DRAM_ACTIVE; GPM 10, DRAM_BW_UTIL)", 0, 1),
    Metric("fp64_active", "ratio", "FP64 pipe active, tensor math excluded "
           "(DCGM_FI_PROF_PIPE_FP64_ACTIVE; GPM 11)", 0, 1),
    Metric("fp32_active", "ratio", "FP32 pipe active, tensor math excluded "
           "(DCGM_FI_PROF_PIPE_FP32_ACTIVE; GPM 12)", 0, 1),
    Metric("fp16_active", "ratio", "FP16 pipe active, tensor math excluded "
           "(DCGM_FI_PROF_PIPE_FP16_ACTIVE; GPM 13)", 0, 1),
)
ACTIVITY_METRIC_NAMES = tuple(m.name for m in ACTIVITY_METRICS)
# Readings added after version 1 first shipped: a source may leave them out
# (absent reads as null), and readers must not require them.
OPTIONAL_GPU_METRICS = (
    Metric("mem_temp", "°C", "memory (HBM) temperature (temperature.memory)", -40, 150),
    # 2**53 mJ is 1 kW for 285 years; past it a JSON reader loses integer precision.
    Metric("energy", "mJ", "energy used since the driver was loaded (NVML total energy consumption)", 0, 2**53),
    Metric("pcie_replay", "count",
           "PCIe replays since the driver was loaded (nvidia-smi -q: Replays Since Reset)", 0, 2**53),
    # The readings behind the health checks (gpulse/health.py).
    Metric("pcie_gen", "", "current PCIe link generation (pcie.link.gen.current)", 1, 16),
    Metric("pcie_gen_max", "", "maximum PCIe link generation of GPU and host (pcie.link.gen.max)", 1, 16),
    Metric("pcie_width", "lanes", "current PCIe link width (pcie.link.width.current)", 1, 64),
    Metric("pcie_width_max", "lanes", "maximum PCIe link width (pcie.link.width.max)", 1, 64),
    Metric("remapped_correctable", "rows", "rows remapped for correctable errors (nvidia-smi -q: Remapped Rows)",
           0, 2**32),
    Metric("remapped_uncorrectable", "rows", "rows remapped for uncorrectable errors", 0, 2**32),
    Metric("retired_pages", "pages", "retired pages, single- and double-bit (retired_pages.sbe + .dbe)", 0, 2**32),
    Metric("nvlink_links", "links", "NVLink links the GPU has", 0, 64),
    Metric("nvlink_links_up", "links", "NVLink links that are up (nvidia-smi nvlink -s)", 0, 64),
    Metric("nvlink_errors", "count",
           "NVLink CRC flit, CRC data, replay and recovery errors, summed over the links that are up "
           "(nvidia-smi nvlink -e)", 0, 2**53),
    *ACTIVITY_METRICS,
)
OPTIONAL_GPU_METRIC_NAMES = tuple(m.name for m in OPTIONAL_GPU_METRICS)
# Optional per-GPU true/false readings behind the health checks: null when not supported.
OPTIONAL_GPU_FLAGS = (
    "remap_pending",  # a row remap waits for a GPU reset (remapped_rows.pending)
    "remap_failure",  # a row remap failed (remapped_rows.failure)
    "retired_pending",  # a page retirement waits for a reboot (retired_pages.pending)
    "ecc_enabled",  # ecc.mode.current
    "ecc_pending",  # ecc.mode.pending differs from ecc.mode.current
    "persistence",  # persistence_mode
    "mig_enabled",  # mig.mode.current
    "mig_pending",  # mig.mode.pending differs from mig.mode.current
)
# Optional per-GPU texts (at most MAX_TEXT characters): vbios_version, compute_mode.
OPTIONAL_GPU_TEXTS = ("vbios", "compute_mode")
# The optional per-GPU "mig" list: the MIG instances of a GPU in MIG mode (mig_enabled), each a GPU of its
# own to the jobs on it (nvidia-smi -L: "MIG 1g.10gb Device 0: (UUID: MIG-...)"). Absent or null on a GPU
# without MIG, [] on one with MIG on and no instance made. The board readings (temperature, power, clocks,
# ECC, PCIe, NVLink) stay on the GPU, whose util is null in MIG mode (NVML answers NOT_SUPPORTED).
# An instance: "gpu_instance" and "compute_instance", its ids (nvidia-smi's GI ID and CI ID; dcgm-exporter's
# GPU_I_ID label, with no compute instance: null), "profile" (GPU_I_PROFILE: "1g.10gb", "1c.3g.40gb"),
# "uuid" (MIG-...), the MIG_METRICS below, "processes" as a GPU's, and "k8s" as a GPU's (the pod holding it).
MAX_MIG_INSTANCES = 8  # 7 on A100, H100, H200 and B200 (nvmlDeviceGetMaxMigDeviceCount), one to spare
MAX_INSTANCE_ID = 31  # GPU instance ids reach 14 on an A100, compute instance ids 7
MIG_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,31}")  # a label value and a page's text as it is
MIG_METRICS = (
    Metric("mem_used", "bytes", "the instance's framebuffer memory used (nvidia-smi -q, MIG Devices: FB Memory "
           "Usage Used; DCGM_FI_DEV_FB_USED with GPU_I_ID)", 0, PB),
    Metric("mem_total", "bytes", "the instance's framebuffer memory (nvidia-smi -q, MIG Devices: FB Memory Usage "
           "Total; DCGM's FB_USED + FB_FREE with GPU_I_ID)", 0, PB),
    # Its GPU instance's activity: NVML's GPM per GPU instance (nvmlGpmMigSampleGet), DCGM's profiling fields
    # with GPU_I_ID. Compute instances sharing a GPU instance report the same.
    *ACTIVITY_METRICS,
)
MIG_METRIC_NAMES = tuple(m.name for m in MIG_METRICS)
# The optional per-node "host" readings, validated the same way.
HOST_METRICS = (
    Metric("cpu_util", "%", "host CPU utilization", 0, 100),
    Metric("mem_used", "bytes", "host memory used", 0, PB),
    Metric("mem_total", "bytes", "host memory total", 0, PB),
)

# The contract's bounds: anything past them is not a sample a collector sends,
# and each one is a cost an entry could otherwise push on ingest, the database
# and every browser (a 50 MB entry was rewritten into every tick's snapshot).
MAX_ENTRY_BYTES = 1024 * 1024
# Node names: host name characters and "_", at most 63 (one DNS label's length);
# they become Redis keys, URL path segments and database values.
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")
# Names Slurm reads as something other than one node, in any case (Slurm compares them with
# strcasecmp): `scontrol update NodeName=ALL` updates every node, and NodeName=DEFAULT in
# slurm.conf sets the defaults of the lines after it. Hostlist syntax ("gpu-[01-99]",
# "a,b") is outside NODE_NAME's characters already. A sample, an ACL user, a drain are
# never made for these names (issue 31).
SLURM_KEYWORDS = frozenset({"all", "default"})
_NODE_NAME_RULE = re.compile(rf"(?!(?i:{'|'.join(sorted(SLURM_KEYWORDS))})\Z){NODE_NAME.pattern}")
MAX_GPUS = 256
MAX_GPU_INDEX = 255
MAX_TEXT = 128  # uuid, model name, process name and user
# The optional per-GPU "k8s" object: the workload on the GPU, for usage attribution.
K8S_KEYS = ("pod", "namespace", "container")
MAX_K8S_NAME = 253  # Kubernetes' longest object name (a DNS subdomain)
MAX_XIDS = 64
MAX_XID = 2**31 - 1
MAX_PROCESSES = 1024
# A process's optional texts besides name and user: its command line (cut to MAX_TEXT) and its
# scheduler identity from its cgroup (collectors/attribution.py): Slurm job and step, Kubernetes
# pod UID and container id. Absent or null where the collector could not tell.
PROCESS_IDENTITY = ("cmd", "job", "step", "pod_uid", "container")
# A process's share of its GPU, where the driver samples it (NVML's nvmlDeviceGetProcessUtilization on a GPU
# without MIG): null where it has no sample for the process in the interval (idle all of it), never 0.
PROCESS_METRICS = (
    Metric("sm_util", "%", "the process's SM utilization (nvidia-smi pmon -s u: sm)", 0, 100),
    Metric("mem_util", "%", "the process's memory controller utilization (nvidia-smi pmon -s u: mem)", 0, 100),
)
MAX_PID = 2**32 - 1
INTERVAL_RANGE = (0.05, 3600.0)  # seconds between samples
# The optional per-node "system" object: driver_version, the CUDA version the driver supports, and the
# node's group (collector --group: a partition or node pool) that version_skew compares it within.
SYSTEM_KEYS = ("driver", "cuda", "group")
# The optional per-node "ib" list: InfiniBand/RoCE ports read from sysfs.
MAX_IB_PORTS = 64
MAX_IB_TEXT = 64  # port name ("mlx5_0/1"), state ("ACTIVE"), phys_state ("LinkUp")
IB_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors")
# The optional per-node "health" object: the checks the collector ran and what did not pass.
MAX_FINDINGS = 1024
MAX_REASON = 256
# A sample's ts is unix seconds from the epoch to 2100. It may be far from the
# reader's clock: a node whose clock is off is still read (gpulse.status judges
# freshness by arrival time and places such samples at it), never rejected.
MAX_TS = 4_102_444_800.0
# Optional collector identity (both or neither): "boot" names one run of a
# collector, "seq" counts that run's samples of the node, so ingest can drop a
# duplicate send and notice a restart.
BOOT = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_SEQ = 2**63 - 1


class MalformedSample(ValueError):
    """A stream entry that is not a valid version-1 sample; the message says why."""


def encode(sample: dict) -> bytes:
    return orjson.dumps(sample)


def valid_node_name(name) -> bool:
    """1-63 host name characters and "_", and not one of Slurm's SLURM_KEYWORDS."""
    return type(name) is str and _NODE_NAME_RULE.fullmatch(name) is not None


def _show(value) -> str:
    """The offending value for a message, short: it comes from whoever wrote the entry."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_GPU_BOUNDS = tuple((m.name, m.low, m.high) for m in GPU_METRICS + OPTIONAL_GPU_METRICS)
_HOST_BOUNDS = tuple((m.name, m.low, m.high) for m in HOST_METRICS)
_MIG_BOUNDS = tuple((m.name, m.low, m.high) for m in MIG_METRICS)
_PROCESS_BOUNDS = tuple((m.name, m.low, m.high) for m in PROCESS_METRICS)
# An IB port's rate (Gb/s, sysfs "rate") and its error counters (sysfs counters/).
_IB_BOUNDS = (("rate", 0, 1e5), *((name, 0, 2**53) for name in IB_COUNTERS))
_KNOWN_THROTTLE = frozenset(THROTTLE_REASONS)
_NUMBERS = frozenset((int, float))


def _null_out_of_range(reading: dict, bounds: tuple, where: str) -> int:
    """Set each reading outside its range (or NaN) to None; return how many; raise on a non-number."""
    nulled = 0
    get = reading.get
    # Exact types, not isinstance: faster on the hot path, and it refuses bool (an int subclass).
    for name, low, high in bounds:
        value = get(name)
        if value is None:
            continue
        kind = type(value)
        if kind is not float and kind is not int:
            raise MalformedSample(f"{where}: {name!r} is not a number or null: {_show(value)}")
        if not low <= value <= high:  # false for NaN too
            reading[name] = None
            nulled += 1
    return nulled


def _is_text_or_none(value) -> bool:
    return value is None or type(value) is str and len(value) <= MAX_TEXT


def _in_bounds_or_none(value, low: float, high: float) -> bool:
    return value is None or type(value) in _NUMBERS and low <= value <= high


def _text_or_none(value, name: str, where: str) -> None:
    if not _is_text_or_none(value):
        raise MalformedSample(f"{where}: {name!r} is not a string of at most {MAX_TEXT} characters or null")


def _check_lists(gpu: dict, node: str, index: int) -> int:
    """Check throttle, xid and processes; return how many process readings were nulled."""
    get = gpu.get
    throttle = get("throttle")
    if throttle:  # None or [] is the common case
        if type(throttle) is not list or len(throttle) > len(THROTTLE_REASONS):
            raise MalformedSample(
                f"node {node} GPU {index}: 'throttle' is not a list of throttle reasons: {_show(throttle)}")
        for reason in throttle:
            if type(reason) is not str or reason not in _KNOWN_THROTTLE:
                raise MalformedSample(f"node {node} GPU {index}: unknown throttle reason {_show(reason)}")
    elif throttle is not None and type(throttle) is not list:
        raise MalformedSample(
            f"node {node} GPU {index}: 'throttle' is not a list of throttle reasons: {_show(throttle)}")
    xid = get("xid")
    if xid:
        if type(xid) is not list or len(xid) > MAX_XIDS:
            raise MalformedSample(
                f"node {node} GPU {index}: 'xid' is not a list of at most {MAX_XIDS} Xid codes: {_show(xid)}")
        for code in xid:
            if type(code) is not int or not 0 <= code <= MAX_XID:
                raise MalformedSample(f"node {node} GPU {index}: Xid {_show(code)} is not an integer 0..{MAX_XID}")
    elif xid is not None and type(xid) is not list:
        raise MalformedSample(f"node {node} GPU {index}: 'xid' is not a list of Xid codes: {_show(xid)}")
    processes = get("processes")
    if processes:
        if type(processes) is not list or len(processes) > MAX_PROCESSES:
            raise MalformedSample(
                f"node {node} GPU {index}: 'processes' is not a list of at most {MAX_PROCESSES} processes")
        nulled = 0
        for process in processes:
            if type(process) is dict:
                get_ = process.get
                pid, name, user, mem = get_("pid"), get_("name"), get_("user"), get_("mem_used")
                if (type(pid) is int and 0 <= pid <= MAX_PID
                        and (name is None or type(name) is str and len(name) <= MAX_TEXT)
                        and (user is None or type(user) is str and len(user) <= MAX_TEXT)
                        and (mem is None or type(mem) in _NUMBERS and 0 <= mem <= PB)
                        and all(_is_text_or_none(get_(key)) for key in PROCESS_IDENTITY)
                        and all(_in_bounds_or_none(get_(name), low, high) for name, low, high in _PROCESS_BOUNDS)):
                    continue
            nulled += _check_process(process, f"node {node} GPU {index}")
        return nulled
    if processes is not None and type(processes) is not list:
        raise MalformedSample(f"node {node} GPU {index}: 'processes' is not a list: {_show(processes)}")
    return 0


def _check_mig(gpu: dict, where: str) -> int:
    """Check the GPU's "mig" list; return how many of its readings were out of range and nulled.

    A malformed list is dropped (null), counted as one nulled reading and its
    reason logged (rate-limited): the GPU and the rest of the sample stand.
    """
    try:
        return _check_instances(gpu["mig"])
    except MalformedSample as exc:
        gpu["mig"] = None
        _mig_dropped.warning("%s: 'mig' dropped: %s", where, exc)
        return 1


def _check_instances(instances) -> int:
    if type(instances) is not list or len(instances) > MAX_MIG_INSTANCES:
        raise MalformedSample(f"not a list of at most {MAX_MIG_INSTANCES} MIG instances: {_show(instances)}")
    nulled = 0
    seen = set()
    for instance in instances:
        if type(instance) is not dict:
            raise MalformedSample(f"an instance that is not an object: {_show(instance)}")
        ids = instance.get("gpu_instance"), instance.get("compute_instance")
        for name, value in zip(("gpu_instance", "compute_instance"), ids, strict=True):
            if (value is not None or name == "gpu_instance") and (
                    type(value) is not int or not 0 <= value <= MAX_INSTANCE_ID):
                raise MalformedSample(f"{name} {_show(value)} is not an integer 0..{MAX_INSTANCE_ID}")
        where = f"instance {ids[0]}" if ids[1] is None else f"instance {ids[0]}/{ids[1]}"  # nvidia-smi's GI/CI
        if ids in seen:
            raise MalformedSample(f"{where} is listed twice")
        seen.add(ids)
        profile = instance.get("profile")
        if profile is not None and (type(profile) is not str or MIG_PROFILE.fullmatch(profile) is None):
            raise MalformedSample(f"{where}: profile {_show(profile)} is not a MIG profile name like 1g.10gb")
        _text_or_none(instance.get("uuid"), "uuid", where)
        nulled += _null_out_of_range(instance, _MIG_BOUNDS, where)
        processes = instance.get("processes")
        if processes is not None:
            if type(processes) is not list or len(processes) > MAX_PROCESSES:
                raise MalformedSample(f"{where}: 'processes' is not a list of at most {MAX_PROCESSES} processes")
            for process in processes:
                nulled += _check_process(process, where)
        if instance.get("k8s") is not None:
            _check_k8s(instance["k8s"], where)
    return nulled


def _check_k8s(k8s, where: str) -> None:
    if type(k8s) is not dict:
        raise MalformedSample(f"{where}: 'k8s' is not an object of pod, namespace and container: {_show(k8s)}")
    for key in K8S_KEYS:  # other keys are dropped, as every field the contract does not name
        name = k8s.get(key)
        if name is not None and (type(name) is not str or len(name) > MAX_K8S_NAME):
            raise MalformedSample(f"{where}: k8s {key!r} is not a string of at most {MAX_K8S_NAME} characters or null")


def _check_identity(gpu: dict, where: str) -> None:
    _text_or_none(gpu.get("uuid"), "uuid", where)
    _text_or_none(gpu.get("name"), "name", where)
    _text_or_none(gpu.get("error"), "error", where)  # why its readings are null (the collector's words)
    lost = gpu.get("lost")
    if lost is not None and type(lost) is not bool:
        raise MalformedSample(f"{where}: 'lost' is not true, false or null")


def _check_health_readings(gpu: dict, where: str) -> None:
    get = gpu.get
    for name in OPTIONAL_GPU_FLAGS:
        value = get(name)
        if value is not None and type(value) is not bool:
            raise MalformedSample(f"{where}: {name!r} is not true, false or null: {_show(value)}")
    for name in OPTIONAL_GPU_TEXTS:
        _text_or_none(get(name), name, where)


def _bounded_text(value, limit: int, what: str, where: str) -> None:
    if type(value) is not str or len(value) > limit:
        raise MalformedSample(f"{where}: {what} is not a string of at most {limit} characters: {_show(value)}")


def _check_system(system, where: str) -> None:
    if type(system) is not dict:
        raise MalformedSample(f"{where}: 'system' is not an object of driver, cuda and group")
    for key in SYSTEM_KEYS:
        _text_or_none(system.get(key), f"system {key}", where)


def _check_ib(ports, where: str) -> int:
    """Check the "ib" port list; return how many counters were out of range and nulled."""
    if type(ports) is not list or len(ports) > MAX_IB_PORTS:
        raise MalformedSample(f"{where}: 'ib' is not a list of at most {MAX_IB_PORTS} ports")
    nulled = 0
    for port in ports:
        if type(port) is not dict:
            raise MalformedSample(f"{where}: an IB port that is not an object: {_show(port)}")
        _bounded_text(port.get("port"), MAX_IB_TEXT, "IB port name", where)
        for key in ("state", "phys_state"):
            value = port.get(key)
            if value is not None:
                _bounded_text(value, MAX_IB_TEXT, f"IB port {key}", where)
        nulled += _null_out_of_range(port, _IB_BOUNDS, f"{where} IB port {port['port']}")
    return nulled


def _check_health(health, where: str) -> None:
    """Check the "health" object; drop, in place, findings of checks this version does not know."""
    if type(health) is not dict:
        raise MalformedSample(f"{where}: 'health' is not an object of checked and findings")
    checked, findings = health.get("checked"), health.get("findings")
    if type(checked) is not list or len(checked) > len(CHECK_IDS) * 4:
        raise MalformedSample(f"{where}: health 'checked' is not a list of check ids")
    for check in checked:
        _bounded_text(check, MAX_IB_TEXT, "a checked id", where)
    if type(findings) is not list or len(findings) > MAX_FINDINGS:
        raise MalformedSample(f"{where}: health 'findings' is not a list of at most {MAX_FINDINGS} findings")
    for finding in findings:
        if type(finding) is not dict:
            raise MalformedSample(f"{where}: a health finding that is not an object: {_show(finding)}")
        _bounded_text(finding.get("check"), MAX_IB_TEXT, "a finding's check", where)
        status, gpu = finding.get("status"), finding.get("gpu")
        if status not in FINDING_STATUSES:
            raise MalformedSample(
                f"{where}: finding status {_show(status)} is not one of {', '.join(FINDING_STATUSES)}")
        if gpu is not None and (type(gpu) is not int or not 0 <= gpu <= MAX_GPU_INDEX):
            raise MalformedSample(f"{where}: finding GPU {_show(gpu)} is not an index 0..{MAX_GPU_INDEX} or null")
        _bounded_text(finding.get("reason"), MAX_REASON, "a finding's reason", where)
    # A newer collector's checks: the reader has no action for them, so they go no further.
    health["checked"] = [check for check in checked if check in CHECK_IDS]
    health["findings"] = [finding for finding in findings if finding["check"] in CHECK_IDS]


def _check_process(process, where: str) -> int:
    if type(process) is not dict:
        raise MalformedSample(f"{where}: a process that is not an object: {_show(process)}")
    pid = process.get("pid")
    if type(pid) is not int or not 0 <= pid <= MAX_PID:
        raise MalformedSample(f"{where}: a process whose pid is not an integer 0..{MAX_PID}: {_show(pid)}")
    _text_or_none(process.get("name"), "process name", where)
    _text_or_none(process.get("user"), "process user", where)
    for key in PROCESS_IDENTITY:
        _text_or_none(process.get(key), f"process {key}", where)
    nulled = _null_out_of_range(process, _PROCESS_BOUNDS, f"{where} process {pid}")
    mem = process.get("mem_used")
    if mem is not None:
        kind = type(mem)
        if kind is not int and kind is not float:
            raise MalformedSample(f"{where}: process {pid} 'mem_used' is not a number or null")
        if not 0 <= mem <= PB:
            process["mem_used"] = None
            nulled += 1
    return nulled


def validate(sample) -> int:
    """Check ``sample`` against the version-1 contract, in place.

    Raise MalformedSample naming the first structural problem (wrong type,
    missing field, a bound exceeded). A reading outside its Metric range, or
    NaN, becomes None; return how many did.
    """
    if type(sample) is not dict:
        raise MalformedSample("not a JSON object")
    version = sample.get("v")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise MalformedSample(
            f"unknown sample version {_show(version)} (this ingest reads version {SCHEMA_VERSION})"
        )
    node = sample.get("node")
    if node is None:
        raise MalformedSample("missing field 'node'")
    if not valid_node_name(node):
        if type(node) is str and node.lower() in SLURM_KEYWORDS:
            raise MalformedSample(f"node name {_show(node)} is a Slurm keyword: scontrol reads it as other nodes")
        raise MalformedSample(
            f"node name {_show(node)} is not 1-63 letters, digits, '.', '-' or '_' (not starting with '.' or '-')"
        )
    ts, interval = sample.get("ts"), sample.get("interval")
    for field, value in (("ts", ts), ("interval", interval)):
        kind = type(value)
        if kind is not float and kind is not int:
            raise MalformedSample(f"node {node}: missing or non-numeric field {field!r}")
    assert ts is not None and interval is not None  # both are numbers: checked just above
    low, high = INTERVAL_RANGE
    if not low <= interval <= high:
        raise MalformedSample(f"node {node}: interval {_show(interval)} is not within {low}..{high} s")
    if not 0 <= ts <= MAX_TS:
        raise MalformedSample(f"node {node}: ts {_show(ts)} is not a unix time (0..{MAX_TS:.0f})")
    seq, boot = sample.get("seq"), sample.get("boot")
    if seq is not None or boot is not None:
        if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
            raise MalformedSample(f"node {node}: seq {_show(seq)} is not an integer 0..2^63-1")
        if type(boot) is not str or BOOT.fullmatch(boot) is None:
            raise MalformedSample(f"node {node}: boot {_show(boot)} is not 1-64 letters, digits, '-' or '_'")
    gpus = sample.get("gpus")
    if type(gpus) is not list:
        raise MalformedSample(f"node {node}: missing field 'gpus'")
    if len(gpus) > MAX_GPUS:
        raise MalformedSample(f"node {node}: {len(gpus)} GPUs, more than {MAX_GPUS}")
    nulled = 0
    seen = set()
    # Runs for every GPU every second: the common, valid case inline with plain
    # locals; the detailed checks (and their messages) only when something is off.
    numbers, bounds, max_text = _NUMBERS, _GPU_BOUNDS, MAX_TEXT
    for gpu in gpus:
        if type(gpu) is not dict:
            raise MalformedSample(f"node {node}: a GPU that is not an object")
        get = gpu.get
        index = get("index")
        if type(index) is not int or not 0 <= index <= MAX_GPU_INDEX or index in seen:
            raise MalformedSample(f"node {node}: GPU index {_show(index)} is not a unique integer 0..{MAX_GPU_INDEX}")
        seen.add(index)
        for name, low, high in bounds:
            value = get(name)
            if value is None or type(value) in numbers and low <= value <= high:
                continue
            nulled += _null_out_of_range(gpu, bounds, f"node {node} GPU {index}")
            break
        throttle, xid, processes = get("throttle"), get("xid"), get("processes")
        if throttle is not None and throttle != [] or xid is not None and xid != [] or processes:
            nulled += _check_lists(gpu, node, index)
        uuid, model, lost = get("uuid"), get("name"), get("lost")
        if (uuid is not None and (type(uuid) is not str or len(uuid) > max_text)
                or model is not None and (type(model) is not str or len(model) > max_text)
                or lost is not None and type(lost) is not bool):
            _check_identity(gpu, f"node {node} GPU {index}")
        k8s = get("k8s")
        if k8s is not None:
            _check_k8s(k8s, f"node {node} GPU {index}")
        _check_health_readings(gpu, f"node {node} GPU {index}")
        if get("mig") is not None:
            nulled += _check_mig(gpu, f"node {node} GPU {index}")
    host = sample.get("host")
    if host is not None:
        if type(host) is not dict:
            raise MalformedSample(f"node {node}: 'host' is not an object")
        nulled += _null_out_of_range(host, _HOST_BOUNDS, f"node {node} host")
    if sample.get("system") is not None:
        _check_system(sample["system"], f"node {node}")
    if sample.get("ib") is not None:
        nulled += _check_ib(sample["ib"], f"node {node}")
    if sample.get("health") is not None:
        _check_health(sample["health"], f"node {node}")
    return nulled


# The fast gate: the contract as msgspec types, AT LEAST as strict as validate(), so
# that whatever they let through is a sample validate() would pass unchanged, with
# nothing nulled. Anything they refuse (an error, a reading out of range, NaN) goes
# to validate(), which decides, words the error and nulls. TypedDicts decode straight
# into the plain dicts the readers use; they drop fields the contract does not name,
# and so does read_checked(): a sample carries only what the contract defines.


def _number(low: float, high: float):
    """A reading within low..high, int or float as it was written (a float field would turn 1 into 1.0)."""
    return (Annotated[int, msgspec.Meta(ge=math.ceil(low), le=math.floor(high))]
            | Annotated[float, msgspec.Meta(ge=low, le=high)])


def _whole(pattern: re.Pattern) -> str:
    return rf"^(?:{pattern.pattern})\Z"  # msgspec searches; \Z, not $, which matches before a final newline


def _record(name: str, fields: dict, required: tuple[str, ...] = ()):
    """A TypedDict of optional fields, but those named in ``required``."""
    # Built at run time from the tables above, which mypy's TypedDict cannot follow.
    fields = {key: Required[kind] if key in required else kind for key, kind in fields.items()}
    return TypedDict(name, fields, total=False)  # type: ignore[operator]


_Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)] | None
_K8sName = Annotated[str, msgspec.Meta(max_length=MAX_K8S_NAME)] | None
_Process = _record("_Process", {
    "pid": Annotated[int, msgspec.Meta(ge=0, le=MAX_PID)],
    "name": _Text, "user": _Text, "mem_used": _number(0, PB) | None,
    **dict.fromkeys(PROCESS_IDENTITY, _Text),
    **{name: _number(low, high) | None for name, low, high in _PROCESS_BOUNDS},
}, required=("pid",))
_K8s = _record("_K8s", dict.fromkeys(K8S_KEYS, _K8sName))
_InstanceId = Annotated[int, msgspec.Meta(ge=0, le=MAX_INSTANCE_ID)]
_MigInstance = _record("_MigInstance", {
    "gpu_instance": _InstanceId, "compute_instance": _InstanceId | None,
    "profile": Annotated[str, msgspec.Meta(pattern=_whole(MIG_PROFILE))] | None, "uuid": _Text,
    **{name: _number(low, high) | None for name, low, high in _MIG_BOUNDS},
    "processes": Annotated[list[_Process], msgspec.Meta(max_length=MAX_PROCESSES)] | None,  # type: ignore[valid-type]
    "k8s": _K8s | None,
}, required=("gpu_instance",))
_Gpu = _record("_Gpu", {
    "index": Annotated[int, msgspec.Meta(ge=0, le=MAX_GPU_INDEX)],
    "uuid": _Text, "name": _Text, "lost": bool | None, "error": _Text,
    **{name: _number(low, high) | None for name, low, high in _GPU_BOUNDS},
    "throttle": Annotated[list[Literal[tuple(THROTTLE_REASONS)]],  # type: ignore[misc]
                          msgspec.Meta(max_length=len(THROTTLE_REASONS))] | None,
    "xid": Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=MAX_XID)]], msgspec.Meta(max_length=MAX_XIDS)] | None,
    "processes": Annotated[list[_Process], msgspec.Meta(max_length=MAX_PROCESSES)] | None,  # type: ignore[valid-type]
    "k8s": _K8s | None,
    "mig": Annotated[list[_MigInstance], msgspec.Meta(max_length=MAX_MIG_INSTANCES)] | None,  # type: ignore[valid-type]
    **dict.fromkeys(OPTIONAL_GPU_FLAGS, bool | None),
    **dict.fromkeys(OPTIONAL_GPU_TEXTS, _Text),
}, required=("index",))
_Host = _record("_Host", {name: _number(low, high) | None for name, low, high in _HOST_BOUNDS})
_System = _record("_System", dict.fromkeys(SYSTEM_KEYS, _Text))
_IbText = Annotated[str, msgspec.Meta(max_length=MAX_IB_TEXT)]
_IbPort = _record("_IbPort", {
    "port": _IbText, "state": _IbText | None, "phys_state": _IbText | None,
    **{name: _number(low, high) | None for name, low, high in _IB_BOUNDS},
}, required=("port",))
_Finding = _record("_Finding", {
    "check": Literal[CHECK_IDS],  # an unknown check goes to validate(), which drops it
    "gpu": Annotated[int, msgspec.Meta(ge=0, le=MAX_GPU_INDEX)] | None,
    "status": Literal[FINDING_STATUSES],
    "reason": Annotated[str, msgspec.Meta(max_length=MAX_REASON)],
}, required=("check", "status", "reason"))
_Health = _record("_Health", {
    "checked": Annotated[list[Literal[CHECK_IDS]], msgspec.Meta(max_length=len(CHECK_IDS) * 4)],  # type: ignore[valid-type]
    "findings": Annotated[list[_Finding], msgspec.Meta(max_length=MAX_FINDINGS)],  # type: ignore[valid-type]
}, required=("checked", "findings"))
_Sample = _record("_Sample", {
    "v": Literal[SCHEMA_VERSION],
    "node": Annotated[str, msgspec.Meta(pattern=_whole(_NODE_NAME_RULE))],
    "ts": _number(0, MAX_TS),
    "interval": _number(*INTERVAL_RANGE),
    "gpus": Annotated[list[_Gpu], msgspec.Meta(max_length=MAX_GPUS)],  # type: ignore[valid-type]
    "host": _Host | None,
    "seq": Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)] | None,
    "boot": Annotated[str, msgspec.Meta(pattern=_whole(BOOT))] | None,
    "system": _System | None,
    "ib": Annotated[list[_IbPort], msgspec.Meta(max_length=MAX_IB_PORTS)] | None,  # type: ignore[valid-type]
    "health": _Health | None,
}, required=("v", "node", "ts", "interval", "gpus"))
_FAST = msgspec.json.Decoder(_Sample)
_FIELDS = {kind: frozenset(kind.__annotations__)
           for kind in (_Sample, _Gpu, _Host, _Process, _K8s, _MigInstance, _System, _IbPort, _Finding, _Health)}


def read_fast(raw: bytes | str) -> dict | None:
    """The sample in ``raw`` if it is valid with every reading in range, else None: read_checked() decides."""
    try:
        sample = _FAST.decode(raw)
    except ValueError:  # msgspec's DecodeError and ValidationError, and bytes that are not UTF-8
        return None
    # What the types cannot say: unique GPU indices, and seq and boot both or neither.
    gpus = sample["gpus"]
    if len({gpu["index"] for gpu in gpus}) != len(gpus):
        return None
    for gpu in gpus:
        instances = gpu.get("mig")
        if instances and len({(i["gpu_instance"], i.get("compute_instance")) for i in instances}) != len(instances):
            return None
    if (sample.get("seq") is None) is not (sample.get("boot") is None):
        return None
    return sample


def _only_known(record: dict, kind) -> None:
    """Drop, in place, the fields of ``record`` that the contract does not name."""
    known = _FIELDS[kind]
    for key in [key for key in record if key not in known]:
        del record[key]


def _drop_unknown(sample: dict) -> None:
    _only_known(sample, _Sample)
    for key, kind in (("host", _Host), ("system", _System), ("health", _Health)):
        if type(sample.get(key)) is dict:
            _only_known(sample[key], kind)
    for port in sample.get("ib") or ():
        _only_known(port, _IbPort)
    for finding in (sample.get("health") or {}).get("findings", ()):
        _only_known(finding, _Finding)
    for gpu in sample["gpus"]:
        _only_known(gpu, _Gpu)
        if type(gpu.get("k8s")) is dict:
            _only_known(gpu["k8s"], _K8s)
        for process in gpu.get("processes") or ():
            _only_known(process, _Process)
        for instance in gpu.get("mig") or ():
            _only_known(instance, _MigInstance)
            if type(instance.get("k8s")) is dict:
                _only_known(instance["k8s"], _K8s)
            for process in instance.get("processes") or ():
                _only_known(process, _Process)


def read_checked(raw: bytes | str) -> tuple[dict, int]:
    """read() without the fast gate: validate() on the decoded entry; raise MalformedSample."""
    try:
        sample = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # Python's json reads NaN, Infinity and 1e400 (as inf), which writers
        # other than gpulse's collectors may send: validate() nulls and counts
        # those readings instead of losing the node's whole sample.
        try:
            sample = json.loads(raw)
        except (ValueError, RecursionError):
            raise MalformedSample(f"not JSON: {exc}") from None
    nulled = validate(sample)
    _drop_unknown(sample)
    return sample, nulled


def read(raw: bytes | str) -> tuple[dict, int]:
    """Return (the sample in ``raw``, how many readings were out of range and nulled); raise MalformedSample."""
    if len(raw) > MAX_ENTRY_BYTES:
        raise MalformedSample(f"entry of {len(raw)} bytes, more than {MAX_ENTRY_BYTES}")
    sample = read_fast(raw)
    if sample is not None:
        return sample, 0
    return read_checked(raw)


# A bandwidth probe result (collectors/probe.py), in the probes stream (field "p")
# and the node's probe history list: written by the node, so read back checked.
PROBE_STATUSES = ("succeeded", "failed", "cancelled", "timed_out")
MAX_PROBE_REASON = 4096
_PROBE_NUMBERS = (("max_bytes", 0, 2**53), ("world_size", 0, 2**20), ("busbw", 0, 1e6), ("avg_busbw", 0, 1e6),
                  ("wrong", 0, 2**53), ("duration_s", 0, 86400))


def json_object(raw: bytes | str, subject: str = "") -> dict:
    """The JSON object in ``raw``; raise MalformedSample saying what it is not (after ``subject``: "probe is ")."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedSample(f"{subject}not JSON: {exc}") from None
    if type(value) is not dict:
        raise MalformedSample(f"{subject}not a JSON object")
    return value


def read_probe(raw: bytes | str) -> dict:
    """Return the probe result in ``raw``, its known fields only; raise MalformedSample."""
    if len(raw) > MAX_ENTRY_BYTES:
        raise MalformedSample(f"probe of {len(raw)} bytes, more than {MAX_ENTRY_BYTES}")
    probe = json_object(raw, "probe is ")
    node, ts, status = probe.get("node"), probe.get("ts"), probe.get("status")
    if not valid_node_name(node):
        raise MalformedSample(f"probe of node {_show(node)}: not a node name")
    if not isinstance(ts, int | float) or type(ts) is bool or not 0 <= ts <= MAX_TS:
        raise MalformedSample(f"probe of {node}: ts {_show(ts)} is not a unix time")
    if status not in PROBE_STATUSES:
        raise MalformedSample(f"probe of {node}: status {_show(status)} is not one of {', '.join(PROBE_STATUSES)}")
    checked = {"v": 1, "node": node, "ts": ts, "status": status}
    for name, low, high in _PROBE_NUMBERS:
        value = probe.get(name)
        if value is not None and (type(value) not in (int, float) or not low <= value <= high):
            raise MalformedSample(f"probe of {node}: {name} {_show(value)} is not within {low}..{high}")
        checked[name] = value
    for name, limit in (("backend", MAX_TEXT), ("reason", MAX_PROBE_REASON)):
        value = probe.get(name)
        if value is not None and (type(value) is not str or len(value) > limit):
            raise MalformedSample(f"probe of {node}: {name} is not a string of at most {limit} characters")
        checked[name] = value
    return checked


# A stream entry's "held": seconds its collector buffered the sample through a
# Redis outage (collectors/publisher.py). A week bounds any real outage.
MAX_HELD = 7 * 86400.0


def held_seconds(raw: bytes | str | None) -> float:
    """Return the entry's "held" field as seconds (0 when absent); raise MalformedSample."""
    if raw is None:
        return 0.0
    try:
        held = float(raw)
    except ValueError:
        held = math.nan
    if not 0 <= held <= MAX_HELD:  # NaN fails too
        raise MalformedSample(f"'held' {_show(raw)} is not seconds within 0..{MAX_HELD:.0f}")
    return held


def parse(raw: bytes | str) -> dict:
    """Return the sample in ``raw``, or raise MalformedSample naming the problem."""
    return read(raw)[0]
