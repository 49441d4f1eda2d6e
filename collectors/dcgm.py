"""The dcgm source: read an existing dcgm-exporter endpoint instead of NVML.

Sites that already run DCGM get gpulse's live view, benchmarks and alerts
without giving the collector NVML access. One GET of the exporter's /metrics
per interval becomes one version-1 sample per host (its ``hostname`` label,
``Hostname`` in older releases), in the same units as the nvml source:
DCGM's MiB become bytes, W, °C, MHz, %, mJ and bytes/s pass through, and so do
the profiling fields' ratios (0-1), the contract's activity readings. A field
the exporter does not serve, or serves as one of DCGM's blank values, is None
(null), never 0 and never the blank's 9.2e18. dcgm-exporter's default counters
lack a few readings (power limit, clock event reasons, ECC); add them to its
counters CSV to get them here.

On a GPU in MIG mode DCGM serves the instances' memory and profiling fields as
series of their own, labelled GPU_I_ID and GPU_I_PROFILE: they become the GPU's
``mig`` list (gpulse.schema), one instance per GPU instance (DCGM names no
compute instance: null), its pod from the series' pod labels.
"""

import ipaddress
import logging
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from collectors.sources import SourceUnavailable
from gpulse.schema import (
    GPU_METRIC_NAMES,
    MAX_MIG_INSTANCES,
    MAX_XID,
    MIG_PROFILE,
    OPTIONAL_GPU_METRIC_NAMES,
    SCHEMA_VERSION,
    MalformedSample,
    validate,
)
from gpulse.throttle import throttle_reasons

log = logging.getLogger(__name__)

MIB = 1024 * 1024
KIB = 1024
DEFAULT_TIMEOUT = 5.0  # s; a longer interval still notices a hung exporter within this
MAX_PAYLOAD = 32 * MIB  # a misdirected URL cannot make the collector read without end
XID_FALLEN_OFF_BUS = 79  # "GPU has fallen off the bus": NVML would answer GPU_IS_LOST

# DCGM's "no value" markers (dcgm_structs.h): BLANK, then NOT_FOUND,
# NOT_SUPPORTED and NOT_PERMISSIONED, for each field type. The exporter prints
# them as plain numbers, an int64 one either exactly or as 9.223372036854776e+18,
# which is 2**63 once read as a float. A genuine reading equal to one of them
# (an energy counter passing 2147483632 mJ) is lost for that one sample.
_INT32_BLANK = 0x7FFFFFF0
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_FP64_BLANK = 140737488355328  # 2**47
BLANKS = frozenset(
    [base + offset for base in (_INT32_BLANK, _INT64_BLANK, _FP64_BLANK) for offset in range(4)] + [2**63]
)


def _mib(value: float) -> int:
    return int(value * MIB)


def _kib(value: float) -> int:
    return int(value * KIB)


def _rate(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


# sample field -> ((DCGM field, conversion to gpulse units), ...), best first:
# the first DCGM field the exporter serves for a GPU wins. %, °C, MHz and
# counts are whole numbers (int) and watts float, as NVML gives them.
FIELDS: dict[str, tuple[tuple[str, Callable[[float], int | float]], ...]] = {
    "util": (("DCGM_FI_DEV_GPU_UTIL", int),),
    "mem_util": (("DCGM_FI_DEV_MEM_COPY_UTIL", int),),
    "mem_used": (("DCGM_FI_DEV_FB_USED", _mib),),
    "temp": (("DCGM_FI_DEV_GPU_TEMP", int),),
    "power": (("DCGM_FI_DEV_POWER_USAGE", float),),
    "power_limit": (("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", float), ("DCGM_FI_DEV_POWER_MGMT_LIMIT", float)),
    "sm_clock": (("DCGM_FI_DEV_SM_CLOCK", int),),
    "mem_clock": (("DCGM_FI_DEV_MEM_CLOCK", int),),
    "fan": (("DCGM_FI_DEV_FAN_SPEED", int),),
    # Volatile double-bit errors are NVML's volatile uncorrected total, as the nvml source reports.
    "ecc_uncorrected": (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", int),),
    # The profiling fields are bytes/s; the older DEV fields are NVML's PCIe
    # throughput in KiB/s (dcgm-exporter's CSV calls them counters, but DCGM
    # fills them from nvmlDeviceGetPcieThroughput, the figure nvidia-smi dmon shows).
    "pcie_tx": (("DCGM_FI_PROF_PCIE_TX_BYTES", _rate), ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", _kib)),
    "pcie_rx": (("DCGM_FI_PROF_PCIE_RX_BYTES", _rate), ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", _kib)),
    "nvlink_tx": (("DCGM_FI_PROF_NVLINK_TX_BYTES", _rate),),
    "nvlink_rx": (("DCGM_FI_PROF_NVLINK_RX_BYTES", _rate),),
    "mem_temp": (("DCGM_FI_DEV_MEMORY_TEMP", int),),
    "energy": (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", int),),
    "pcie_replay": (("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", int),),
}
# Activity reading (gpulse.schema.ACTIVITY_METRICS) -> the DCGM profiling field that is it, as a ratio.
# dcgm-exporter serves them from its dcp-metrics counters CSV (GR_ENGINE, TENSOR and DRAM by default).
# On a MIG GPU DCGM profiles the instances (GPU_I_ID series: the instances'), so the GPU's are null.
PROFILING_FIELDS = {
    "gr_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "tensor_hmma_active": "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "tensor_imma_active": "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    "tensor_dmma_active": "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",  # DCGM's name for the FP64 tensor pipe (DMMA)
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "fp64_active": "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "fp32_active": "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "fp16_active": "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
}
FIELDS.update({reading: ((field, float),) for reading, field in PROFILING_FIELDS.items()})
# Framebuffer total is not among the default counters: used + free + reserved
# is what NVML's v2 memory info calls total.
FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED = (
    "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
)
# NVML's clock event reasons bitmask (DCGM renamed the field in 3.3).
THROTTLE_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# The last Xid code DCGM saw on the GPU, with no time: a repeat of the same
# code leaves it unchanged.
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
# dcgm-exporter's own Xid counts, one series per code (an ``xid`` label), when
# its counters CSV enables them: the total since the exporter started, or the
# count within its --xid-count-window-size. They do see a repeated code.
XID_COUNTS = ("DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_XID_ERRORS_COUNT")
# The node: newer dcgm-exporter releases write ``hostname``, older ones ``Hostname``.
HOST_LABELS = ("hostname", "Hostname")
# The Kubernetes workload on the GPU (dcgm-exporter's pod mapping); older
# releases spelled them pod_name, pod_namespace and container_name.
K8S_LABELS = {"pod": ("pod", "pod_name"), "namespace": ("namespace", "pod_namespace"),
              "container": ("container", "container_name")}

# A MIG instance's series: its memory (MiB) and its profiling fields.
MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
_INSTANCE_FIELDS = {FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED, *PROFILING_FIELDS.values()}

_WANTED = (
    {dcgm for choices in FIELDS.values() for dcgm, _ in choices}
    | {FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED, XID_FIELD}
    | set(THROTTLE_FIELDS) | set(XID_COUNTS)
)


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _label(labels: dict, names: tuple[str, ...]) -> str:
    return next((labels[name] for name in names if labels.get(name)), "")


def _k8s(labels: dict) -> dict | None:
    workload = {key: _label(labels, names) or None for key, names in K8S_LABELS.items()}
    return workload if any(workload.values()) else None


def is_remote(url: str) -> bool:
    """Return whether ``url`` names another machine: neither localhost nor a loopback address."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost
        return True


def parse_exposition(text: str) -> dict[tuple[str, int], dict]:
    """Return {(host, gpu index): {"uuid", "name", "k8s", "values", "xid_counts", "mig"}} from exporter text.

    ``values`` maps a DCGM field to its number, ``xid_counts`` one of
    XID_COUNTS to {Xid code: count}. A host is its ``hostname`` (or
    ``Hostname``) label, "" when the exporter sends neither. A blank (BLANKS)
    or non-finite value is left out, as if the exporter had not served it.
    Series of MIG instances (a ``GPU_I_ID`` label) go to ``mig``, {GPU
    instance id: {"profile", "k8s", "values"}}, never to the GPU's values: one
    instance's memory is not the GPU's. A GPU shared by several pods reports
    the first pod the exporter lists.
    """
    gpus: dict[tuple[str, int], dict] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ValueError(f"not Prometheus text format: {_one_line(exc)}") from None
    for family in families:
        # Counters' sample names gain a _total suffix in the parser; the family keeps DCGM's name.
        if family.name not in _WANTED:
            continue
        for sample in family.samples:
            labels = sample.labels
            if "gpu" not in labels:
                continue
            try:
                index = int(labels["gpu"])
            except ValueError:
                continue
            gpu = gpus.setdefault(
                (_label(labels, HOST_LABELS), index),
                {"uuid": labels.get("UUID"), "name": labels.get("modelName"), "k8s": None,
                 "values": {}, "xid_counts": {}, "mig": {}},
            )
            instance = _instance(gpu, labels, family.name) if labels.get("GPU_I_ID") else None
            if labels.get("GPU_I_ID") and instance is None:
                continue
            if instance is None and gpu["k8s"] is None:
                gpu["k8s"] = _k8s(labels)
            value = sample.value
            if value in BLANKS or not math.isfinite(value):
                continue
            if instance is not None:
                instance["values"].setdefault(family.name, value)
            elif family.name in XID_COUNTS:
                code = _xid_code(labels.get("xid"))
                if code is not None:
                    gpu["xid_counts"].setdefault(family.name, {})[code] = value
            else:
                gpu["values"].setdefault(family.name, value)
    return gpus


def _instance(gpu: dict, labels: dict, field: str) -> dict | None:
    """The MIG instance a GPU_I_ID series is of, None for a field an instance does not report or an id that
    is not a number."""
    if field not in _INSTANCE_FIELDS:
        return None
    try:
        gpu_instance = int(labels["GPU_I_ID"])
    except ValueError:
        return None
    profile = labels.get("GPU_I_PROFILE") or ""
    return gpu["mig"].setdefault(gpu_instance, {
        "profile": profile if MIG_PROFILE.fullmatch(profile) else None, "k8s": _k8s(labels), "values": {}})


def _instances(mig: dict[int, dict]) -> list[dict]:
    """The GPU's ``mig`` list, by GPU instance id: DCGM's per-instance fields in the contract's units."""
    instances = []
    for gpu_instance, instance in sorted(mig.items())[:MAX_MIG_INSTANCES]:
        values = instance["values"]
        reading = {"gpu_instance": gpu_instance, "compute_instance": None, "profile": instance["profile"],
                   "uuid": None, "mem_used": _mib(values[FB_USED]) if FB_USED in values else None,
                   "mem_total": _mem_total(values), "processes": None,
                   **{name: values.get(field) for name, field in PROFILING_FIELDS.items()}}
        if instance["k8s"] is not None:
            reading["k8s"] = instance["k8s"]
        instances.append(reading)
    return instances


def _xid_code(text) -> int | None:
    """Return the Xid code of an ``xid`` label, None where it is not one."""
    try:
        code = int(text)
    except (TypeError, ValueError):
        return None
    return code if 0 < code <= MAX_XID else None


def _mem_total(values: dict) -> int | None:
    if FB_TOTAL in values:
        return _mib(values[FB_TOTAL])
    if FB_USED not in values or FB_FREE not in values:
        return None
    return _mib(values[FB_USED] + values[FB_FREE] + values.get(FB_RESERVED, 0))


def _throttle(values: dict) -> list[str] | None:
    for field in THROTTLE_FIELDS:
        if field in values:
            return throttle_reasons(int(values[field]))
    return None


class DcgmSource:
    """GPUs as a dcgm-exporter endpoint serves them, one version-1 sample per host per call."""

    name = "dcgm"

    def __init__(self, url: str, interval: float, node_name: str | None = None, timeout: float | None = None):
        """Read ``url`` (e.g. http://localhost:9400/metrics) at each sample().

        ``node_name`` names the node instead of the exporter's hostname label,
        for a single-host exporter whose label is not the node's name (in
        Kubernetes, the exporter pod's name unless it is given NODE_NAME).
        """
        self.url = url
        self.interval = interval
        self.node_name = node_name
        self.timeout = min(interval, DEFAULT_TIMEOUT) if timeout is None else timeout
        self.remote = is_remote(url)
        self._warned_unlabelled = False
        # Per GPU, what its Xid fields said at the previous sample: an Xid is
        # reported when they change, and the first sample after a start is the
        # baseline, since DCGM cannot say when the code it holds happened.
        self._baselined: set[tuple[str, str | int]] = set()  # GPUs seen in an earlier sample
        self._last_xid: dict[tuple[str, str | int], int] = {}
        self._last_xid_counts: dict[tuple[str, str | int], dict[int, float]] = {}
        self._dropping: dict[str, str] = {}  # node -> why its samples are dropped, logged once

    def fetch(self) -> str:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                body = response.read(MAX_PAYLOAD + 1)
        except urllib.error.HTTPError as exc:
            raise SourceUnavailable(f"dcgm: {self.url} answered HTTP {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # URLError, refused, timeout, a malformed URL
            raise SourceUnavailable(f"dcgm: cannot read {self.url}: {_one_line(exc)}") from None
        if len(body) > MAX_PAYLOAD:
            raise SourceUnavailable(f"dcgm: {self.url} sent more than {MAX_PAYLOAD // MIB} MiB; is it a dcgm-exporter?")
        return body.decode("utf-8", errors="replace")

    def sample(self) -> list[dict]:
        ts = time.time()
        text = self.fetch()
        try:
            gpus = parse_exposition(text)
        except ValueError as exc:
            raise SourceUnavailable(f"dcgm: {self.url}: {exc}") from None
        if not gpus:
            raise SourceUnavailable(f"dcgm: {self.url} serves no DCGM GPU fields; is it a dcgm-exporter?")
        hosts = {host for host, _ in gpus}
        if self.node_name is not None and len(hosts) > 1:
            raise SourceUnavailable(
                f"dcgm: {self.url} serves {len(hosts)} hosts ({', '.join(sorted(hosts))}); "
                "a node name applies to a single-host exporter only"
            )
        by_node: dict[str, list[dict]] = {}
        for (host, index), gpu in sorted(gpus.items()):
            node = self.node_name or host or self._unlabelled_node()
            by_node.setdefault(node, []).append(self._gpu(node, index, gpu))
        samples = [
            {"v": SCHEMA_VERSION, "node": node, "ts": ts, "interval": self.interval, "gpus": readings,
             # The exporter reports GPUs only, and this collector may run on another machine.
             "host": None}
            for node, readings in by_node.items()
        ]
        return [sample for sample in samples if self._publishable(sample)]

    def _unlabelled_node(self) -> str:
        """Name a node whose exporter sends no hostname label: old exporters run on the node they describe."""
        if self.remote and not self._warned_unlabelled:
            self._warned_unlabelled = True
            log.warning("dcgm: %s sends no hostname label; its GPUs are reported as this machine's (%s). "
                        "Give --node-name, or the exporter a hostname label, to name its node",
                        self.url, socket.gethostname())
        return socket.gethostname()

    def _publishable(self, sample: dict) -> bool:
        """Range check the sample against the contract, nulling what is out of range; drop what still fails.

        Whatever passes is encodable: validate() leaves no number outside a
        Metric range, so none overflows JSON's 64-bit integers. A sample it
        rejects would be rejected by ingest too; the reason is logged once per
        node, not every interval.
        """
        node = sample["node"]
        try:
            validate(sample)
        except MalformedSample as exc:
            if self._dropping.get(node) != str(exc):
                self._dropping[node] = str(exc)
                log.warning("dcgm: %s: dropping the sample of node %r: %s", self.url, node, exc)
            return False
        if self._dropping.pop(node, None) is not None:
            log.info("dcgm: %s: node %r sends valid samples again", self.url, node)
        return True

    def _gpu(self, node: str, index: int, gpu: dict) -> dict:
        values = gpu["values"]
        reading = {"index": index, "uuid": gpu["uuid"], "name": gpu["name"], "lost": False}
        for field, choices in FIELDS.items():
            reading[field] = next(
                (convert(values[dcgm]) for dcgm, convert in choices if dcgm in values), None
            )
        reading["mem_total"] = _mem_total(values)
        reading["throttle"] = _throttle(values)
        reading["processes"] = None  # dcgm-exporter does not list processes
        if gpu["k8s"] is not None:
            reading["k8s"] = gpu["k8s"]
        if gpu["mig"]:
            reading["mig"] = _instances(gpu["mig"])
        gpu_key = (node, gpu["uuid"] or index)
        code = values.get(XID_FIELD)
        changed = [] if code is None else self._changed_xid(gpu_key, int(code))
        counts = next((gpu["xid_counts"][name] for name in XID_COUNTS if name in gpu["xid_counts"]), None)
        reading["xid"] = changed if counts is None else self._counted_xids(gpu_key, counts)
        self._baselined.add(gpu_key)
        if code == XID_FALLEN_OFF_BUS:
            # DCGM may keep serving the last values it read; a lost GPU reports none.
            reading.update(dict.fromkeys(GPU_METRIC_NAMES + OPTIONAL_GPU_METRIC_NAMES), lost=True, throttle=None)
            reading.pop("mig", None)
        return reading

    def _changed_xid(self, gpu_key: tuple, code: int) -> list[int]:
        """Report the last-Xid field's code when it differs from the previous sample's (a repeat is invisible)."""
        previous = self._last_xid.get(gpu_key)
        self._last_xid[gpu_key] = code
        if previous is None or code == previous or not 0 < code <= MAX_XID:
            return []
        return [code]

    def _counted_xids(self, gpu_key: tuple, counts: dict[int, float]) -> list[int]:
        """Report each code whose count rose since the previous sample; a series new since then counts from 0.

        The exporter serves no count series for a GPU before its first Xid, so
        a GPU seen before without one also counts from 0. A count that fell (a
        restarted exporter, or an event leaving the windowed count's window)
        is the new baseline, reporting nothing.
        """
        previous = self._last_xid_counts.get(gpu_key, {} if gpu_key in self._baselined else None)
        self._last_xid_counts[gpu_key] = counts
        if previous is None:
            return []
        return sorted(code for code, count in counts.items() if count > previous.get(code, 0))

    def close(self) -> None:
        """Nothing to release: each sample opens and closes its own connection."""
