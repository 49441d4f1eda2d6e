"""The dcgm source: read an existing dcgm-exporter endpoint instead of NVML.

Sites that already run DCGM get gpulse's live view, benchmarks and alerts
without giving the collector NVML access. One GET of the exporter's /metrics
per interval becomes one version-1 sample per host (its ``Hostname`` label),
in the same units as the nvml source: DCGM's MiB become bytes, W, °C, MHz, %
and bytes/s pass through. A field the exporter does not serve is None (null),
never 0. dcgm-exporter's default counters lack a few readings (power limit,
clock event reasons, ECC); add them to its counters CSV to get them here.
"""

import math
import socket
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from collectors.sources import SourceUnavailable
from gpulse.schema import GPU_METRIC_NAMES, SCHEMA_VERSION
from gpulse.throttle import throttle_reasons

MIB = 1024 * 1024
KIB = 1024
DEFAULT_TIMEOUT = 5.0  # s; a longer interval still notices a hung exporter within this
MAX_PAYLOAD = 32 * MIB  # a misdirected URL cannot make the collector read without end
XID_FALLEN_OFF_BUS = 79  # "GPU has fallen off the bus": NVML would answer GPU_IS_LOST


def _mib(value: float) -> int:
    return int(value * MIB)


def _kib(value: float) -> int:
    return int(value * KIB)


def _rate(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


# sample field -> ((DCGM field, conversion to gpulse units), ...), best first:
# the first DCGM field the exporter serves for a GPU wins. %, °C, MHz and
# counts are whole numbers (int) and watts float, as NVML gives them.
FIELDS = {
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
}
# Framebuffer total is not among the default counters: used + free + reserved
# is what NVML's v2 memory info calls total.
FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED = (
    "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
)
# NVML's clock event reasons bitmask (DCGM renamed the field in 3.3).
THROTTLE_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"

_WANTED = (
    {dcgm for choices in FIELDS.values() for dcgm, _ in choices}
    | {FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED, XID_FIELD}
    | set(THROTTLE_FIELDS)
)


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def parse_exposition(text: str) -> dict[tuple[str, int], dict]:
    """Return {(host, gpu index): {"uuid", "name", "values": {DCGM field: value}}} from exporter text.

    A host is its ``Hostname`` label ("" when the exporter sends none). Series
    of MIG instances (a ``GPU_I_ID`` label) are skipped: gpulse reports whole
    GPUs, and one instance's memory is not the GPU's.
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
            if labels.get("GPU_I_ID") or "gpu" not in labels:
                continue
            try:
                index = int(labels["gpu"])
            except ValueError:
                continue
            gpu = gpus.setdefault(
                (labels.get("Hostname", ""), index),
                {"uuid": labels.get("UUID"), "name": labels.get("modelName"), "values": {}},
            )
            if math.isfinite(sample.value):
                gpu["values"].setdefault(family.name, sample.value)
    return gpus


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

        ``node_name`` names the node instead of the exporter's Hostname label,
        for a single-host exporter whose label is not the node's name (in
        Kubernetes, the exporter pod's name unless it is given NODE_NAME).
        """
        self.url = url
        self.interval = interval
        self.node_name = node_name
        self.timeout = min(interval, DEFAULT_TIMEOUT) if timeout is None else timeout
        # The last XID code seen per GPU: DCGM's field holds the last XID until
        # the host engine restarts, and an XID is reported once, when it appears.
        self._last_xid: dict[tuple[str, str | int], int] = {}

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
            # Old exporters send no Hostname label; they run on the node they describe.
            node = self.node_name or host or socket.gethostname()
            by_node.setdefault(node, []).append(self._gpu(node, index, gpu))
        return [
            {"v": SCHEMA_VERSION, "node": node, "ts": ts, "interval": self.interval, "gpus": readings,
             # The exporter reports GPUs only, and this collector may run on another machine.
             "host": None}
            for node, readings in by_node.items()
        ]

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
        code = values.get(XID_FIELD)
        reading["xid"] = [] if code is None else self._new_xid(node, gpu["uuid"] or index, int(code))
        if code == XID_FALLEN_OFF_BUS:
            # DCGM may keep serving the last values it read; a lost GPU reports none.
            reading.update(dict.fromkeys(GPU_METRIC_NAMES), lost=True, throttle=None)
        return reading

    def _new_xid(self, node: str, gpu_id: str | int, code: int) -> list[int]:
        previous = self._last_xid.get((node, gpu_id))
        self._last_xid[(node, gpu_id)] = code
        return [code] if code and code != previous else []

    def close(self) -> None:
        """Nothing to release: each sample opens and closes its own connection."""
