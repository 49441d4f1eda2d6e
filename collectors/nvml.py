"""The nvml source: this node's GPUs read through NVML (the nvidia-ml-py binding).

Every NVML call goes through ``nvml_query``: a reading the GPU or driver does
not offer becomes None (JSON null, never 0), a GPU that fell off the bus raises
GpuLost (the GPU stays in the sample with ``lost: true``), and NVML itself
going away raises SourceUnavailable. Each GPU is read by its own thread under
a deadline, so one hung NVML call costs one GPU's readings, never the loop.
Each reading's comment names the nvidia-smi query that shows the same number.
"""

import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import Future, wait

import psutil
import pynvml

from collectors.sources import SourceUnavailable
from gpulse.schema import GPU_METRIC_NAMES, MAX_TEXT, OPTIONAL_GPU_METRIC_NAMES, SCHEMA_VERSION
from gpulse.throttle import throttle_reasons

log = logging.getLogger(__name__)

KIB = 1024
MAX_READ_TIMEOUT = 5.0  # s; longer intervals still notice a hung GPU within this
MAX_XIDS_PER_READ = 64  # an event storm cannot keep a reader draining forever
TIMED_OUT = "NVML read timed out"

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
        **dict.fromkeys(GPU_METRIC_NAMES + OPTIONAL_GPU_METRIC_NAMES), "throttle": None, "xid": [],
        "processes": None,
    }


def _describe_process(pid: int, mem_used: int | None) -> dict:
    """Name and owner from /proc; None when the process is gone or in another PID namespace."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            name, user = process.name(), process.username()
    except psutil.Error:
        name = user = None
    return {"pid": pid, "name": name, "user": user, "mem_used": mem_used}


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


class _Gpu:
    """One GPU's handle, identity and counters. Only its reader thread touches it."""

    def __init__(self, index: int, memory_version, clock_reasons):
        self.index = index
        self.uuid: str | None = None
        self.name: str | None = None
        self._memory_version = memory_version
        self._clock_reasons = clock_reasons
        self._handle = None
        self._events = None  # an NVML event set with this GPU's XID events, or None
        self._nvlink_fields: list[tuple[int, int]] = []  # (field id, link); empty without NVLink
        self._nvlink_last: tuple[int, int | None, int | None] | None = None  # (µs, tx KiB, rx KiB) at the previous read
        self._prepared = False

    def read(self) -> dict:
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
        self._events = self._xid_event_set()
        self._prepared = True

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
        # utilization.gpu, utilization.memory (%)
        utilization = nvml_query(pynvml.nvmlDeviceGetUtilizationRates, handle)
        # memory.used, memory.total (bytes); v2 "used" leaves out driver-reserved memory, as nvidia-smi does
        memory = nvml_query(pynvml.nvmlDeviceGetMemoryInfo, handle, version=self._memory_version)
        reasons = nvml_query(self._clock_reasons, handle)  # clocks_event_reasons.active (bitmask)
        nvlink_tx, nvlink_rx = self._nvlink_rates()
        return {
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
            "processes": self._processes(),
            # temperature.memory (°C; HBM boards): NVML has it as a field value only
            "mem_temp": _field_value(
                nvml_query(pynvml.nvmlDeviceGetFieldValues, handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
            ),
            # no nvidia-smi query field; nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded)
            "energy": nvml_query(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            # nvidia-smi -q: PCI "Replays Since Reset"
            "pcie_replay": nvml_query(pynvml.nvmlDeviceGetPcieReplayCounter, handle),
        }

    def _xids(self) -> list[int]:
        """Return the XID codes raised since the last read (the kernel log's "NVRM: Xid" lines)."""
        codes: list[int] = []
        if self._events is None:
            return codes
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

    def _processes(self) -> list[dict] | None:
        """nvidia-smi --query-compute-apps=pid,process_name,used_memory, graphics processes included."""
        compute = nvml_query(pynvml.nvmlDeviceGetComputeRunningProcesses, self._handle)
        graphics = nvml_query(pynvml.nvmlDeviceGetGraphicsRunningProcesses, self._handle)
        if compute is None and graphics is None:
            return None
        # A process doing both (nvidia-smi type "C+G") is in both lists; report it once.
        memory: dict[int, int | None] = {}
        for process in (compute or []) + (graphics or []):
            memory.setdefault(process.pid, process.usedGpuMemory)  # None where the driver cannot tell
        return [_describe_process(pid, used) for pid, used in memory.items()]


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

    def __init__(self, node_name: str, interval: float, read_timeout: float | None = None):
        """Initialise NVML now; raise SourceUnavailable with a one-line reason if it cannot be."""
        self.node_name = node_name
        self.interval = interval
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
        self._readers = [_Reader(_Gpu(index, memory_version, clock_reasons)) for index in range(count)]
        psutil.cpu_percent(None)  # the first call only starts the measuring window
        log.info("NVML: driver %s, %d GPUs", nvml_query(pynvml.nvmlSystemGetDriverVersion), count)

    def sample(self) -> list[dict]:
        ts = time.time()
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
        return [{"v": SCHEMA_VERSION, "node": self.node_name, "ts": ts, "interval": self.interval,
                 "gpus": gpus, "host": host}]

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
        for reader in self._readers:
            reader.stop()  # a stuck reader ends when its call returns
            if not reader.busy:
                reader.gpu.release()
        self._shutdown()

    @staticmethod
    def _shutdown() -> None:
        with contextlib.suppress(SourceUnavailable):
            nvml_query(pynvml.nvmlShutdown)
