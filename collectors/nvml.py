"""The nvml source: this node's GPUs read through NVML (the nvidia-ml-py binding).

Every NVML call goes through ``nvml_query``: a reading the GPU or driver does
not offer becomes None (JSON null, never 0), a GPU that fell off the bus raises
GpuLost (the GPU stays in the sample with ``lost: true``), and NVML itself
going away raises SourceUnavailable. Each GPU is read by its own thread under
a deadline, so one hung NVML call costs one GPU's readings, never the loop.
Each reading's comment names the nvidia-smi query that shows the same number.

The health readings (gpulse/health.py judges them) are read the same way: a
call the GPU does not support gives null, which the checks report as unknown.

The activity readings (SM, tensor, DRAM...: gpulse.schema.ACTIVITY_METRICS)
come from GPM, NVML's GPU Performance Monitoring (Hopper and newer), which
computes them from two samples of the GPU's counters: each GPU keeps its
previous sample, so every reading covers the time since the one before.

A GPU in MIG mode reports its instances as ``mig`` (gpulse.schema, "mig"):
each MIG device's ids, profile, UUID, memory, processes and its GPU
instance's GPM activity. Which instances exist is read again every
MIG_LAYOUT_INTERVAL, not every sample: enumerating costs a call per slot.

Each process of a GPU carries its SM and memory utilization (``sm_util``,
``mem_util``, %; nvidia-smi pmon -s u), so jobs time-sliced on one GPU (or
sharing it through MPS) are told apart: one nvmlDeviceGetProcessUtilization
call per GPU and sample, asking for the driver's samples newer than the newest
one the previous call returned, so each reading covers the time since. A
process with no sample in that time (NVML leaves out one idle all period), a GPU
that does not offer it and MIG (NOT_SUPPORTED) give null, never 0.
"""

import contextlib
import logging
import math
import queue
import threading
import time
from concurrent.futures import Future, wait
from pathlib import Path

import psutil
import pynvml

from collectors.attribution import PROC, ProcessDescriptions
from collectors.infiniband import read_ports
from collectors.pod_resources import PodResources
from collectors.sources import SourceUnavailable
from gpulse.schema import (
    ACTIVITY_METRIC_NAMES,
    GPU_METRIC_NAMES,
    MAX_MIG_INSTANCES,
    MAX_TEXT,
    MIG_PROFILE,
    OPTIONAL_GPU_FLAGS,
    OPTIONAL_GPU_METRIC_NAMES,
    OPTIONAL_GPU_TEXTS,
    SCHEMA_VERSION,
)
from gpulse.throttle import throttle_reasons

log = logging.getLogger(__name__)

KIB = 1024
MAX_READ_TIMEOUT = 5.0  # s; longer intervals still notice a hung GPU within this
MAX_XIDS_PER_READ = 64  # an event storm cannot keep a reader draining forever
TIMED_OUT = "NVML read timed out"
# The energy counter costs 3-6 ms of CPU a call on an H100, twice what the rest of a GPU's read
# costs together (docs/PERFORMANCE.md, "On a real H100"): it is read at most this often, and the
# samples in between carry the last value read, as DCGM's cached fields do. Usage totals stay
# exact (the counter's deltas add up); a GPU-minute's energy can shift by up to this into the next.
ENERGY_READ_INTERVAL = 10.0  # s
# The shortest time an activity reading covers (two GPM samples at least this far apart); the first
# reading after start waits for it.
GPM_MIN_WINDOW = 0.1  # s
# Activity reading -> the NVML GPM metric it is (percent; the contract's ratio is a hundredth of it).
GPM_METRICS = {
    "gr_active": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "tensor_hmma_active": pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    "tensor_imma_active": pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL,
    "tensor_dmma_active": pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL,
    "dram_active": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp64_active": pynvml.NVML_GPM_METRIC_FP64_UTIL,
    "fp32_active": pynvml.NVML_GPM_METRIC_FP32_UTIL,
    "fp16_active": pynvml.NVML_GPM_METRIC_FP16_UTIL,
}
_NO_ACTIVITY = dict.fromkeys(ACTIVITY_METRIC_NAMES)
# How often a MIG GPU's instances are enumerated again (nvmlDeviceGetMigDeviceHandleByIndex, one call per
# slot, and each new instance's identity): an administrator makes and destroys instances while the driver
# stays loaded, seldom. In between, the instances last found are read.
MIG_LAYOUT_INTERVAL = 10.0  # s

# NVML itself is gone: nothing can be read until it is initialised again.
_NVML_GONE = (
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_Uninitialized,
    pynvml.NVMLError_LibRmVersionMismatch,
)
# Ordinary answers meaning "this GPU or driver does not offer that": null, silently.
# Timeout is how an event set says it has no event waiting.
_NOT_AVAILABLE = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_NotFound,
    pynvml.NVMLError_NoData,
    pynvml.NVMLError_Timeout,
    pynvml.NVMLLibraryMismatchError,  # the binding's name for a missing versioned entry point
)
_warned: set[tuple[str, int]] = set()

# nvmlComputeMode_t -> the name nvidia-smi shows (compute_mode).
COMPUTE_MODES = {
    pynvml.NVML_COMPUTEMODE_DEFAULT: "Default",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD: "Exclusive_Thread",
    pynvml.NVML_COMPUTEMODE_PROHIBITED: "Prohibited",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "Exclusive_Process",
}
# The NVLink error counters behind nvlink_errors (nvidia-smi nvlink -e).
NVLINK_ERROR_COUNTERS = (
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
)


class GpuLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST: it fell off the bus."""


def describe_nvml_error(exc: pynvml.NVMLError) -> str:
    """Return one line a person can act on."""
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return "NVML: libnvidia-ml.so.1 not found — is the NVIDIA driver installed?"
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return "NVML: driver not loaded — is the nvidia kernel module loaded? (try nvidia-smi)"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return "NVML: no permission to open the GPUs — check access to /dev/nvidia*"
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return "NVML: library and kernel driver versions differ — reload the nvidia module or reboot"
    if isinstance(exc, pynvml.NVMLError_Uninitialized):
        return "NVML: not initialised — was the driver unloaded?"
    return f"NVML: {exc}"


def nvml_query(func, *args, default=None, **kwargs):
    """Return ``func(*args, **kwargs)``, or ``default`` where that reading is not available.

    Raise GpuLost when the GPU fell off the bus and SourceUnavailable when NVML went away.
    """
    try:
        return func(*args, **kwargs)
    except pynvml.NVMLError_GpuIsLost:
        raise GpuLost from None
    except _NVML_GONE as exc:
        raise SourceUnavailable(describe_nvml_error(exc)) from None
    except _NOT_AVAILABLE:
        return default
    except pynvml.NVMLError as exc:
        # Unexpected, but still one reading of one GPU: say so once, report null.
        if (func.__name__, exc.value) not in _warned:
            _warned.add((func.__name__, exc.value))
            log.warning("NVML: %s failed (%s); reporting null", func.__name__, exc)
        return default


def _init_nvml() -> None:
    # Outside nvml_query on purpose: here every failure means "no NVML", never a null reading.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise SourceUnavailable(describe_nvml_error(exc)) from None


def _has_entry_point(name: str) -> bool:
    return hasattr(pynvml.nvmlLib, name)


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


def _bytes(kib: int | None) -> int | None:
    return None if kib is None else kib * KIB


def _null_gpu(index: int, uuid: str | None, name: str | None) -> dict:
    return {
        "index": index, "uuid": uuid, "name": name, "lost": False,
        **dict.fromkeys(GPU_METRIC_NAMES + OPTIONAL_GPU_METRIC_NAMES + OPTIONAL_GPU_FLAGS + OPTIONAL_GPU_TEXTS),
        "throttle": None, "xid": None, "processes": None,
    }


def _enabled(state: int | None) -> bool | None:
    return None if state is None else state == pynvml.NVML_FEATURE_ENABLED


def _changing(modes: list[int] | None) -> bool | None:
    """Whether a (current, pending) mode pair waits for a reset to change."""
    return None if modes is None else modes[0] != modes[1]


def _nvlink_state(handle, link: int) -> int | None:
    """nvmlDeviceGetNvLinkState; None for a link number the GPU does not have (INVALID_ARGUMENT)."""
    try:
        return pynvml.nvmlDeviceGetNvLinkState(handle, link)
    except pynvml.NVMLError_InvalidArgument:
        return None


def cuda_version(version: int | None) -> str | None:
    """NVML's CUDA driver version, 1000 * major + 10 * minor (12040), as nvidia-smi shows it ("12.4")."""
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


def read_system() -> dict:
    """The node's driver and the CUDA version it supports (nvidia-smi's header line)."""
    return {
        "driver": nvml_query(pynvml.nvmlSystemGetDriverVersion),
        "cuda": cuda_version(nvml_query(pynvml.nvmlSystemGetCudaDriverVersion_v2)),
    }


# nvmlFieldValue_t's valueType -> the member of its value union that holds it.
_FIELD_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
}


def _field_value(values) -> int | float | None:
    """Return the one field value NVML answered, None where it did not."""
    if values is None or values[0].nvmlReturn != pynvml.NVML_SUCCESS or values[0].valueType not in _FIELD_MEMBERS:
        return None
    return getattr(values[0].value, _FIELD_MEMBERS[values[0].valueType])


def _counter_sum(values) -> int | None:
    readable = [v.value.ullVal for v in values if v.nvmlReturn == pynvml.NVML_SUCCESS]
    return sum(readable) if readable else None


def _rate_kib(now: int | None, before: int | None, seconds: float) -> float | None:
    if now is None or before is None or now < before:  # a reset counter gives no rate
        return None
    return (now - before) * KIB / seconds


def _metrics_request() -> pynvml.c_nvmlGpmMetricsGet_t:
    """nvmlGpmMetricsGet's argument asking for GPM_METRICS; ~19 KB with the binding's metric array, so built once."""
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    for metric, metric_id in zip(request.metrics, GPM_METRICS.values(), strict=False):
        metric.metricId = metric_id
    return request


class _Activity:
    """One GPU's GPM samples and the activity readings between them. Only its reader thread touches it.

    Two sample buffers: the previous sample, kept between reads, and the one
    each read fills; they swap after each read, so nothing is allocated per read.
    """

    def __init__(self, sample_get, *target):
        """``sample_get(*target, sample)`` fills a sample: nvmlGpmSampleGet(GPU) or nvmlGpmMigSampleGet(GPU, GI)."""
        self._sample_get, self._target = sample_get, target
        self._previous = nvml_query(pynvml.nvmlGpmSampleAlloc)
        self._current = nvml_query(pynvml.nvmlGpmSampleAlloc)
        self._previous_at: float | None = None  # monotonic s the previous sample was taken; None: none yet
        self._last = _NO_ACTIVITY
        self._request = _metrics_request()
        self._take_first()

    def read(self, wait_until: float) -> dict:
        """The activity since the previous read (nvidia-smi dmon --gpm-metrics); null where GPM gives none.

        The first read after the first sample waits until GPM_MIN_WINDOW has
        passed, so even a single sample (``--once``) has the readings, unless
        the window ends after ``wait_until`` (monotonic s: short intervals have
        short read deadlines); then it is null and the window goes on. A read
        sooner than that after the previous one (an interval under 100 ms)
        keeps the previous sample and repeats the last readings, as long as
        the GPU still gives samples.
        """
        if self._previous is None or self._current is None:
            return _NO_ACTIVITY
        if self._previous_at is None:  # the first sample failed: this read's one starts the window
            self._take_first()
            return _NO_ACTIVITY
        now = time.monotonic()
        since = now - self._previous_at
        if since < GPM_MIN_WINDOW and self._last is _NO_ACTIVITY:
            if now + GPM_MIN_WINDOW - since > wait_until:
                return _NO_ACTIVITY
            time.sleep(GPM_MIN_WINDOW - since)
        if nvml_query(self._sample_get, *self._target, self._current) is None:
            return _NO_ACTIVITY  # the previous sample stays: the next reading covers both intervals
        if since < GPM_MIN_WINDOW and self._last is not _NO_ACTIVITY:
            return self._last
        request = self._request
        request.sample1, request.sample2 = self._previous, self._current
        self._previous, self._current, self._previous_at = self._current, self._previous, time.monotonic()
        if nvml_query(pynvml.nvmlGpmMetricsGet, request) is None:
            self._last = _NO_ACTIVITY
        else:
            # 4 decimals (0.01 %) is finer than any use of the reading; a double's 17 digits cost bytes.
            self._last = {name: round(metric.value / 100, 4) if metric.nvmlReturn == pynvml.NVML_SUCCESS else None
                          for name, metric in zip(GPM_METRICS, request.metrics, strict=False)}
        return self._last

    def release(self) -> None:
        for sample in (self._previous, self._current):
            if sample is not None:
                nvml_query(pynvml.nvmlGpmSampleFree, sample)
        self._previous = self._current = None

    def _take_first(self) -> None:
        if self._previous is not None and nvml_query(self._sample_get, *self._target, self._previous) is not None:
            self._previous_at = time.monotonic()


class _ProcessUtilization:
    """One GPU's per-process SM and memory utilization (nvidia-smi pmon -s u: sm, mem), each read covering
    the driver's samples since the newest one the read before returned."""

    def __init__(self, handle):
        self._handle = handle
        self._last_seen = 0  # µs, the CPU timestamp of the newest sample read; 0: all the driver keeps

    def read(self) -> dict[int, tuple[int, int]]:
        """pid -> (SM %, memory %) of its newest sample; a process without one is not in it."""
        samples = nvml_query(pynvml.nvmlDeviceGetProcessUtilization, self._handle, self._last_seen, default=())
        newest: dict = {}
        for sample in samples:  # the driver may hold several samples of a process since the last read
            if sample.pid not in newest or sample.timeStamp > newest[sample.pid].timeStamp:
                newest[sample.pid] = sample
        if newest:
            self._last_seen = max(sample.timeStamp for sample in newest.values())
        return {pid: (sample.smUtil, sample.memUtil) for pid, sample in newest.items()}


def running_processes(handle, descriptions: ProcessDescriptions, graphics: bool = True,
                      utilization: _ProcessUtilization | None = None) -> list[dict] | None:
    """nvidia-smi --query-compute-apps=pid,process_name,used_memory, graphics processes included, each
    with its SM and memory utilization from ``utilization`` (None: null, as in MIG mode)."""
    compute = nvml_query(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    graphics_processes = nvml_query(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle) if graphics else None
    if compute is None and graphics_processes is None:
        return None
    # A process doing both (nvidia-smi type "C+G") is in both lists; report it once.
    memory: dict[int, int | None] = {}
    for process in (compute or []) + (graphics_processes or []):
        memory.setdefault(process.pid, process.usedGpuMemory)  # None where the driver cannot tell
    shares = utilization.read() if utilization is not None and memory else {}
    return [{**descriptions.describe(pid, used), **_utilization_fields(shares.get(pid))}
            for pid, used in memory.items()]


def _utilization_fields(share: tuple[int, int] | None) -> dict:
    sm, mem = (None, None) if share is None else share
    return {"sm_util": sm, "mem_util": mem}


def mig_profile(name: str | None) -> str | None:
    """A MIG device's profile from its name, as NVML gives it and nvidia-smi -L shows it:
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb"; None where the name holds none."""
    if name is None:
        return None
    _, marker, profile = name.rpartition("MIG ")
    return profile if marker and MIG_PROFILE.fullmatch(profile) else None


class _MigDevice:
    """One MIG device (a compute instance of a GPU instance): its handle and identity, read when found."""

    def __init__(self, handle, gpu_instance: int, compute_instance: int | None):
        self.handle = handle
        self.gpu_instance = gpu_instance
        self.identity = {
            "gpu_instance": gpu_instance,  # nvidia-smi: GI ID
            "compute_instance": compute_instance,  # nvidia-smi: CI ID
            "profile": mig_profile(nvml_query(pynvml.nvmlDeviceGetName, handle)),
            "uuid": nvml_query(pynvml.nvmlDeviceGetUUID, handle),  # MIG-...
        }


class _MigLayout:
    """The MIG devices of a GPU in MIG mode and their GPU instances' GPM samples. Only its GPU's reader
    thread touches it."""

    def __init__(self, parent, gpm: bool, memory_version, descriptions: ProcessDescriptions):
        self._parent = parent
        self._gpm = gpm
        self._memory_version = memory_version
        self._descriptions = descriptions
        self._devices: list[_MigDevice] = []
        self._activity: dict[int, _Activity] = {}  # per GPU instance id: its compute instances share it
        self._found_at = -math.inf  # monotonic s

    def read(self, wait_until: float) -> list[dict]:
        """Each MIG device's readings (nvidia-smi -q, MIG Devices); its activity waits as _Activity.read."""
        now = time.monotonic()
        if now - self._found_at >= MIG_LAYOUT_INTERVAL:
            self._find()
            self._found_at = now
        activity = {gi: samples.read(wait_until) for gi, samples in self._activity.items()}
        instances = []
        for device in self._devices:
            memory = nvml_query(pynvml.nvmlDeviceGetMemoryInfo, device.handle, version=self._memory_version)
            instances.append({
                **device.identity,
                "mem_used": None if memory is None else memory.used,
                "mem_total": None if memory is None else memory.total,
                # MIG has no graphics: only compute processes run in an instance
                "processes": running_processes(device.handle, self._descriptions, graphics=False),
                **activity.get(device.gpu_instance, _NO_ACTIVITY),
            })
        return instances

    def release(self) -> None:
        for samples in self._activity.values():
            samples.release()
        self._activity = {}

    def _find(self) -> None:
        """Enumerate the MIG devices; a slot may be empty (NOT_FOUND) with later ones in use."""
        count = nvml_query(pynvml.nvmlDeviceGetMaxMigDeviceCount, self._parent) or 0
        devices = []
        for slot in range(count):
            handle = nvml_query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, self._parent, slot)
            gpu_instance = None if handle is None else nvml_query(pynvml.nvmlDeviceGetGpuInstanceId, handle)
            if gpu_instance is None:
                continue  # an empty slot: destroying an instance leaves a gap, the next slot may be in use
            compute_instance = nvml_query(pynvml.nvmlDeviceGetComputeInstanceId, handle)
            devices.append(_MigDevice(handle, gpu_instance, compute_instance))
            if len(devices) == MAX_MIG_INSTANCES:
                break
        self._devices = devices
        in_use = {device.gpu_instance for device in devices}
        for gone in set(self._activity) - in_use:
            self._activity.pop(gone).release()
        if self._gpm:
            for gpu_instance in in_use - set(self._activity):
                self._activity[gpu_instance] = _Activity(pynvml.nvmlGpmMigSampleGet, self._parent, gpu_instance)


class _Gpu:
    """One GPU's handle, identity and counters. Only its reader thread touches it."""

    def __init__(self, index: int, memory_version, clock_reasons, descriptions: ProcessDescriptions,
                 energy_interval: float, read_timeout: float):
        self.index = index
        self._read_timeout = read_timeout
        self._descriptions = descriptions  # its processes' owners and cgroups, shared by the node's GPUs
        self.uuid: str | None = None
        self.name: str | None = None
        self._memory_version = memory_version
        self._clock_reasons = clock_reasons
        self._handle = None
        self._events = None  # an NVML event set with this GPU's XID events, or None
        self._nvlink_fields: list[tuple[int, int]] = []  # (field id, link); empty without NVLink
        self._nvlink_last: tuple[int, int | None, int | None] | None = None  # (µs, tx KiB, rx KiB) at the previous read
        self._links: list[int] = []  # the NVLink links this GPU has
        self._static: dict = {}  # the readings that cannot change while the driver is loaded
        self._energy_interval = energy_interval
        self._energy: int | None = None  # the counter as last read, and when (monotonic s)
        self._energy_read_at = -math.inf
        self._activity: _Activity | None = None  # None where the GPU has no GPM
        self._process_utilization: _ProcessUtilization | None = None
        self._mig: _MigLayout | None = None  # while the GPU is in MIG mode
        self._read_started = 0.0  # monotonic s
        self._prepared = False

    def read(self) -> dict:
        self._read_started = time.monotonic()
        try:
            if not self._prepared:
                self._prepare()
            if self._handle is None:
                return {**_null_gpu(self.index, self.uuid, self.name), "error": "NVML gave no handle for this GPU"}
            return self._readings()
        except GpuLost:
            return {**_null_gpu(self.index, self.uuid, self.name), "lost": True, "xid": self._xids()}

    def timed_out(self) -> dict:
        return {**_null_gpu(self.index, self.uuid, self.name), "error": TIMED_OUT}

    def release(self) -> None:
        if self._mig is not None:
            with contextlib.suppress(GpuLost, SourceUnavailable):
                self._mig.release()
            self._mig = None
        if self._activity is not None:
            with contextlib.suppress(GpuLost, SourceUnavailable):
                self._activity.release()
            self._activity = None
        if self._events is not None:
            with contextlib.suppress(GpuLost, SourceUnavailable):
                nvml_query(pynvml.nvmlEventSetFree, self._events)
            self._events = None

    def _prepare(self) -> None:
        # A GPU lost before its first read raises GpuLost here and is set up at a later read.
        self._handle = nvml_query(pynvml.nvmlDeviceGetHandleByIndex, self.index)
        if self._handle is None:
            return
        self.uuid = nvml_query(pynvml.nvmlDeviceGetUUID, self._handle)
        self.name = nvml_query(pynvml.nvmlDeviceGetName, self._handle)
        self._nvlink_fields = self._nvlink_links()
        self._links = self._existing_links()
        self._static = self._static_readings()
        self._events = self._xid_event_set()
        self._activity = self._gpm()
        self._process_utilization = _ProcessUtilization(self._handle)
        self._prepared = True

    def _gpm(self) -> _Activity | None:
        """The GPU's GPM samples where it has GPM (Hopper and newer; drivers from R520), else None."""
        support = nvml_query(pynvml.nvmlGpmQueryDeviceSupport, self._handle)
        supported = support is not None and support.isSupportedDevice
        return _Activity(pynvml.nvmlGpmSampleGet, self._handle) if supported else None

    def _existing_links(self) -> list[int]:
        """The NVLink links this GPU has: those whose state NVML answers for."""
        # Links are soldered in: asked once, not NVML_NVLINK_MAX_LINKS calls per GPU every second.
        return [link for link in range(pynvml.NVML_NVLINK_MAX_LINKS)
                if nvml_query(_nvlink_state, self._handle, link) is not None]

    def _static_readings(self) -> dict:
        """Readings of the board and its slot, read once: they change only with the driver or the hardware.

        A driver reload ends NVML for this process (SourceUnavailable), and the
        source that replaces it reads them again.
        """
        handle = self._handle
        vbios = nvml_query(pynvml.nvmlDeviceGetVbiosVersion, handle)
        return {
            # pcie.link.gen.max and pcie.link.width.max: what this GPU in this slot can reach.
            # Not nvmlDeviceGetGpuMaxPcieLinkGeneration (pcie.link.gen.gpumax), the GPU's alone:
            # a Gen5 GPU in a Gen4 host would then read as a degraded link.
            "pcie_gen_max": nvml_query(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_width_max": nvml_query(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
            "vbios": None if vbios is None else vbios[:MAX_TEXT],  # vbios_version
            # nvidia-smi nvlink -s lists them; null where NVML answers for none (no NVLink)
            "nvlink_links": len(self._links) or None,
        }

    def _xid_event_set(self):
        supported = nvml_query(pynvml.nvmlDeviceGetSupportedEventTypes, self._handle, default=0)
        if not supported & pynvml.nvmlEventTypeXidCriticalError:
            return None
        events = nvml_query(pynvml.nvmlEventSetCreate)
        if events is not None:
            try:
                nvml_query(pynvml.nvmlDeviceRegisterEvents, self._handle, pynvml.nvmlEventTypeXidCriticalError, events)
            except GpuLost:
                nvml_query(pynvml.nvmlEventSetFree, events)
                raise
        return events

    def _nvlink_links(self) -> list[tuple[int, int]]:
        values = nvml_query(pynvml.nvmlDeviceGetFieldValues, self._handle, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        if values is None or values[0].nvmlReturn != pynvml.NVML_SUCCESS:
            return []
        links = range(values[0].value.uiVal)
        return [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in links] + [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in links
        ]

    def _readings(self) -> dict:
        handle = self._handle
        # Within half the read timeout, so that the first read's wait for GPM's window never times it out.
        wait_until = self._read_started + self._read_timeout / 2
        health = self._health_readings()
        instances = self._mig_instances(health["mig_enabled"], wait_until)
        # utilization.gpu, utilization.memory (%): NOT_SUPPORTED (null) in MIG mode
        utilization = nvml_query(pynvml.nvmlDeviceGetUtilizationRates, handle)
        # memory.used, memory.total (bytes); v2 "used" leaves out driver-reserved memory, as nvidia-smi does
        memory = nvml_query(pynvml.nvmlDeviceGetMemoryInfo, handle, version=self._memory_version)
        reasons = nvml_query(self._clock_reasons, handle)  # clocks_event_reasons.active (bitmask)
        nvlink_tx, nvlink_rx = self._nvlink_rates()
        readings = {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "lost": False,
            "util": None if utilization is None else utilization.gpu,
            "mem_util": None if utilization is None else utilization.memory,
            "mem_used": None if memory is None else memory.used,
            "mem_total": None if memory is None else memory.total,
            # temperature.gpu (°C)
            "temp": nvml_query(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
            # power.draw, enforced.power.limit (NVML: mW)
            "power": _watts(nvml_query(pynvml.nvmlDeviceGetPowerUsage, handle)),
            "power_limit": _watts(nvml_query(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
            # clocks.sm, clocks.mem (MHz)
            "sm_clock": nvml_query(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "mem_clock": nvml_query(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            # fan.speed (%); not supported on passively cooled boards
            "fan": nvml_query(pynvml.nvmlDeviceGetFanSpeed, handle),
            "throttle": None if reasons is None else throttle_reasons(reasons),
            # ecc.errors.uncorrected.volatile.total; not supported with ECC off
            "ecc_uncorrected": nvml_query(
                pynvml.nvmlDeviceGetTotalEccErrors, handle,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC,
            ),
            "xid": self._xids(),
            # nvidia-smi dmon -s t: txpci, rxpci (NVML: KiB/s over a 20 ms window, so each call takes ~20 ms)
            "pcie_tx": _bytes(nvml_query(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)),
            "pcie_rx": _bytes(nvml_query(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)),
            "nvlink_tx": nvlink_tx,
            "nvlink_rx": nvlink_rx,
            # In MIG mode, its instances' processes: a reader that knows no MIG still sees the GPU held.
            "processes": (running_processes(handle, self._descriptions, utilization=self._process_utilization)
                          if instances is None else _all_processes(instances)),
            # temperature.memory (°C; HBM boards): NVML has it as a field value only
            "mem_temp": _field_value(
                nvml_query(pynvml.nvmlDeviceGetFieldValues, handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
            ),
            "energy": self._energy_counter(),
            # nvidia-smi -q: PCI "Replays Since Reset"
            "pcie_replay": nvml_query(pynvml.nvmlDeviceGetPcieReplayCounter, handle),
            **self._static,
            **health,
            # Last: the first read after start waits for GPM's 100 ms window, less the time the others took.
            **(_NO_ACTIVITY if self._activity is None else self._activity.read(wait_until)),
        }
        if instances is not None:
            readings["mig"] = instances
        return readings

    def _mig_instances(self, mig_enabled: bool | None, wait_until: float) -> list[dict] | None:
        """The MIG instances while the GPU is in MIG mode, else None (and their GPM samples freed)."""
        if not mig_enabled:
            if self._mig is not None:
                self._mig.release()
                self._mig = None
            return None
        if self._mig is None:
            self._mig = _MigLayout(self._handle, self._activity is not None, self._memory_version,
                                   self._descriptions)
        return self._mig.read(wait_until)

    def _energy_counter(self) -> int | None:
        """nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded; no nvidia-smi query field),
        read at most every energy interval: between reads, the last value."""
        now = time.monotonic()
        if now - self._energy_read_at >= self._energy_interval:
            self._energy = nvml_query(pynvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
            self._energy_read_at = now
        return self._energy

    def _health_readings(self) -> dict:
        """The readings behind the health checks that can change while the GPU runs."""
        handle = self._handle
        # remapped_rows.correctable, .uncorrectable, .pending, .failure (Ampere and newer)
        remapped = nvml_query(pynvml.nvmlDeviceGetRemappedRows, handle)
        ecc = nvml_query(pynvml.nvmlDeviceGetEccMode, handle)  # ecc.mode.current, ecc.mode.pending
        mig = nvml_query(pynvml.nvmlDeviceGetMigMode, handle)  # mig.mode.current, mig.mode.pending
        mode = nvml_query(pynvml.nvmlDeviceGetComputeMode, handle)
        up, errors = self._nvlink_health()
        readings = {
            "pcie_gen": nvml_query(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),  # pcie.link.gen.current
            "pcie_width": nvml_query(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),  # pcie.link.width.current
            "remapped_correctable": None if remapped is None else remapped[0],
            "remapped_uncorrectable": None if remapped is None else remapped[1],
            "remap_pending": None if remapped is None else bool(remapped[2]),
            "remap_failure": None if remapped is None else bool(remapped[3]),
            "retired_pages": None,
            "retired_pending": None,
            "ecc_enabled": None if ecc is None else _enabled(ecc[0]),
            "ecc_pending": _changing(ecc),
            "persistence": _enabled(nvml_query(pynvml.nvmlDeviceGetPersistenceMode, handle)),  # persistence_mode
            "compute_mode": None if mode is None else COMPUTE_MODES.get(mode),  # compute_mode
            "mig_enabled": None if mig is None else _enabled(mig[0]),
            "mig_pending": _changing(mig),
            "nvlink_links_up": up,
            "nvlink_errors": errors,
        }
        if remapped is None:
            # Page retirement is what GPUs before Ampere do instead of row remapping;
            # GPUs that remap rows answer NOT_SUPPORTED, so they are not asked.
            readings["retired_pages"], readings["retired_pending"] = self._retired_pages()
        return readings

    def _retired_pages(self) -> tuple[int | None, bool | None]:
        """retired_pages.sbe + retired_pages.dbe, and retired_pages.pending."""
        handle = self._handle
        counts = [nvml_query(pynvml.nvmlDeviceGetRetiredPages, handle, cause) for cause in (
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        )]
        pages = None if None in counts else sum(len(addresses) for addresses in counts)
        return pages, _enabled(nvml_query(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle))

    def _nvlink_health(self) -> tuple[int | None, int | None]:
        """Return (links up, error count summed over the links that are up).

        nvidia-smi nvlink -s shows each link's state, nvidia-smi nvlink -e its
        CRC flit, CRC data, replay and recovery counters. The per-link calls,
        not the *_ERROR_COUNT_TOTAL field values: those read 0 on Hopper. A
        counter the GPU does not keep (CRC data on some) is left out of the
        sum; null when nothing could be read.
        """
        if not self._links:
            return None, None
        handle = self._handle
        states = [nvml_query(_nvlink_state, handle, link) for link in self._links]
        if None in states:  # a link that answered once and no longer does: cannot tell how many are up
            return None, None
        up = [link for link, state in zip(self._links, states, strict=True) if state == pynvml.NVML_FEATURE_ENABLED]
        counts = [nvml_query(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, counter)
                  for link in up for counter in NVLINK_ERROR_COUNTERS]
        readable = [count for count in counts if count is not None]
        return len(up), sum(readable) if readable else None

    def _xids(self) -> list[int] | None:
        """Return the XID codes raised since the last read (the kernel log's "NVRM: Xid" lines), or
        None where the GPU delivers no XID events: the xid check is then unknown, not a pass."""
        if self._events is None:
            return None
        codes: list[int] = []
        with contextlib.suppress(GpuLost):  # a lost GPU still delivers the XID that announced it
            for _ in range(MAX_XIDS_PER_READ):
                event = nvml_query(pynvml.nvmlEventSetWait, self._events, 0)
                if event is None:
                    break
                if event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    codes.append(event.eventData)
        return codes

    def _nvlink_rates(self) -> tuple[float | None, float | None]:
        """Return NVLink (tx, rx) bytes/s over all links since the previous read.

        nvidia-smi nvlink -gt d shows the per-link Data Tx/Rx KiB counters these come from.
        """
        if not self._nvlink_fields:
            return None, None
        values = nvml_query(pynvml.nvmlDeviceGetFieldValues, self._handle, self._nvlink_fields)
        if values is None:
            return None, None
        links = len(self._nvlink_fields) // 2
        stamp = max(v.timestamp for v in values) or int(time.time() * 1e6)
        current = (stamp, _counter_sum(values[:links]), _counter_sum(values[links:]))
        last, self._nvlink_last = self._nvlink_last, current
        if last is None or stamp <= last[0]:
            return None, None
        seconds = (stamp - last[0]) / 1e6
        return _rate_kib(current[1], last[1], seconds), _rate_kib(current[2], last[2], seconds)


def _all_processes(instances: list[dict]) -> list[dict] | None:
    """The processes of every instance; None where no instance's could be read."""
    lists = [instance["processes"] for instance in instances if instance["processes"] is not None]
    return [process for processes in lists for process in processes] if lists or not instances else None


class _Reader:
    """A daemon thread that reads one GPU on request, so a hung NVML call stalls only that GPU."""

    def __init__(self, gpu: _Gpu):
        self.gpu = gpu
        self.busy = False  # a read is in progress (or stuck); no new one is queued behind it
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        # Daemon: a thread stuck inside NVML must not keep the process alive at exit.
        threading.Thread(target=self._serve, name=f"nvml-gpu-{gpu.index}", daemon=True).start()

    def request(self) -> Future:
        future: Future = Future()
        self.busy = True
        self._requests.put(future)
        return future

    def stop(self) -> None:
        self._requests.put(None)

    def _serve(self) -> None:
        while (future := self._requests.get()) is not None:
            try:
                result = self.gpu.read()
            except Exception as exc:  # sample() decides what it means
                self.busy = False
                future.set_exception(exc)
            else:
                self.busy = False
                future.set_result(result)


class NvmlSource:
    """The GPUs of this node, one version-1 sample per call."""

    name = "nvml"

    def __init__(self, node_name: str, interval: float, read_timeout: float | None = None,
                 sysfs: Path | None = None, procfs: Path | None = None, group: str | None = None,
                 pod_resources: Path | None = None, energy_interval: float | None = None):
        """Initialise NVML now; raise SourceUnavailable with a one-line reason if it cannot be.

        With ``sysfs`` (the folder where sysfs is mounted, /sys on the node), each
        sample carries the node's InfiniBand/RoCE ports as ``ib``. With ``procfs``,
        the host's CPU and memory (psutil) and its GPU processes' owners, commands
        and cgroups (collectors/attribution.py) are read there: a collector in a
        container given the host's /proc reports the node, not the container.
        ``group`` (a Slurm partition, a Kubernetes node pool) goes out as
        ``system.group``: version_skew compares the node with its group.
        With ``pod_resources`` (the kubelet's pod-resources socket), each GPU a
        pod holds carries that pod as ``k8s`` (collectors/pod_resources.py).
        ``energy_interval``: seconds between reads of each GPU's energy counter (None: ENERGY_READ_INTERVAL).
        """
        if procfs is not None:
            psutil.PROCFS_PATH = str(procfs)  # psutil's documented setting; one source per process
        self.node_name = node_name
        self.interval = interval
        self.sysfs = sysfs
        self.read_timeout = min(interval / 2, MAX_READ_TIMEOUT) if read_timeout is None else read_timeout
        self._closed = False
        _init_nvml()
        try:
            count = nvml_query(pynvml.nvmlDeviceGetCount)
            if count is None:
                raise SourceUnavailable("NVML: cannot count the GPUs")
        except SourceUnavailable:
            self._shutdown()
            raise
        # Drivers before R510 lack the v2 memory call, before R535 the clock event reasons.
        memory_version = pynvml.nvmlMemory_v2 if _has_entry_point("nvmlDeviceGetMemoryInfo_v2") else None
        clock_reasons = (
            pynvml.nvmlDeviceGetCurrentClocksEventReasons
            if _has_entry_point("nvmlDeviceGetCurrentClocksEventReasons")
            else pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        energy_interval = ENERGY_READ_INTERVAL if energy_interval is None else energy_interval
        # One for all the GPUs: a process that several GPUs or MIG instances list is read once a sample.
        self._descriptions = ProcessDescriptions(procfs or PROC)
        self._readers = [_Reader(_Gpu(index, memory_version, clock_reasons, self._descriptions, energy_interval,
                                      self.read_timeout))
                         for index in range(count)]
        psutil.cpu_percent(None)  # the first call only starts the measuring window
        # Fixed while NVML is open: a driver upgrade unloads the module, which ends NVML here.
        self.system = read_system()
        if group is not None:
            self.system["group"] = group
        log.info("NVML: driver %s, CUDA %s, %d GPUs", self.system["driver"], self.system["cuda"], count)
        # Started once NVML is open: a node without a driver, retrying, asks the kubelet nothing.
        self._pods = None if pod_resources is None else PodResources(pod_resources)
        if self._pods is not None:
            self._pods.start()

    def sample(self) -> list[dict]:
        ts = time.time()
        self._descriptions.new_sample()
        # A reader still stuck in an earlier call gets no new request, so threads never pile up.
        pending = {reader: None if reader.busy else reader.request() for reader in self._readers}
        memory = psutil.virtual_memory()
        host = {
            "cpu_util": psutil.cpu_percent(None),
            # total - available, as free(1) counts "used": page cache is not in use
            "mem_used": memory.total - memory.available,
            "mem_total": memory.total,
        }
        wait([future for future in pending.values() if future is not None], timeout=self.read_timeout)
        gpus = [self._gpu_result(reader, future) for reader, future in pending.items()]
        if self._pods is not None:
            # The device plugin hands out MIG devices by their own UUIDs (MIG-...).
            for device in [*gpus, *(instance for gpu in gpus for instance in gpu.get("mig") or ())]:
                workload = self._pods.owner(device["uuid"])
                if workload is not None:  # absent, not null, where no pod holds it: as the dcgm source
                    device["k8s"] = workload
        sample = {"v": SCHEMA_VERSION, "node": self.node_name, "ts": ts, "interval": self.interval,
                  "gpus": gpus, "host": host, "system": dict(self.system)}
        if self.sysfs is not None:
            sample["ib"] = read_ports(self.sysfs)
        return [sample]

    def _gpu_result(self, reader: _Reader, future: Future | None) -> dict:
        if future is None or not future.done():
            if future is not None:
                log.warning("NVML: GPU %d read took over %.1f s; not read again until that call returns",
                            reader.gpu.index, self.read_timeout)
            return reader.gpu.timed_out()
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, SourceUnavailable):
            raise error
        log.error("NVML: reading GPU %d failed", reader.gpu.index, exc_info=error)
        failed = f"read failed: {error}"[:MAX_TEXT]  # the contract's bound on text
        return {**_null_gpu(reader.gpu.index, reader.gpu.uuid, reader.gpu.name), "error": failed}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pods is not None:
            self._pods.stop()
        for reader in self._readers:
            reader.stop()  # a stuck reader ends when its call returns
            if not reader.busy:
                reader.gpu.release()
        self._shutdown()

    @staticmethod
    def _shutdown() -> None:
        with contextlib.suppress(SourceUnavailable):
            nvml_query(pynvml.nvmlShutdown)
