"""Telemetry sample, version 1: the one format every source produces.

Units: bytes, bytes/s, W, °C, MHz, %. A metric the GPU does not support is
None (JSON null), never 0. A GPU that fell off the bus stays in the list with
``lost: True`` and every reading None.
"""

from dataclasses import dataclass

import orjson

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str


# One line per numeric GPU reading; display, export and validation all read it.
GPU_METRICS = (
    Metric("util", "%", "GPU utilization (nvidia-smi: utilization.gpu)"),
    Metric("mem_util", "%", "memory controller utilization (utilization.memory)"),
    Metric("mem_used", "bytes", "framebuffer memory used (memory.used)"),
    Metric("mem_total", "bytes", "framebuffer memory total (memory.total)"),
    Metric("temp", "°C", "GPU core temperature (temperature.gpu)"),
    Metric("power", "W", "board power draw (power.draw)"),
    Metric("power_limit", "W", "enforced power limit (enforced.power.limit)"),
    Metric("sm_clock", "MHz", "SM clock (clocks.sm)"),
    Metric("mem_clock", "MHz", "memory clock (clocks.mem)"),
    Metric("fan", "%", "fan speed (fan.speed); null on passively cooled boards"),
    Metric("ecc_uncorrected", "count", "volatile uncorrected ECC errors (ecc.errors.uncorrected.volatile.total)"),
    Metric("pcie_tx", "bytes/s", "PCIe transmit throughput"),
    Metric("pcie_rx", "bytes/s", "PCIe receive throughput"),
    Metric("nvlink_tx", "bytes/s", "NVLink transmit throughput, all links"),
    Metric("nvlink_rx", "bytes/s", "NVLink receive throughput, all links"),
)
GPU_METRIC_NAMES = tuple(m.name for m in GPU_METRICS)

class MalformedSample(ValueError):
    """A stream entry that is not a valid version-1 sample; the message says why."""


def encode(sample: dict) -> bytes:
    return orjson.dumps(sample)


# Exact types, not isinstance: faster on the hot path, and it refuses bool (an int subclass).
_READING_TYPES = frozenset((int, float, type(None)))


def _number_or_none(value) -> bool:
    return type(value) in _READING_TYPES


def parse(raw: bytes | str) -> dict:
    """Return the sample in ``raw``, or raise MalformedSample naming the problem."""
    try:
        sample = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedSample(f"not JSON: {exc}") from None
    if not isinstance(sample, dict):
        raise MalformedSample("not a JSON object")
    version = sample.get("v")
    if version != SCHEMA_VERSION:
        raise MalformedSample(f"unknown sample version {version!r} (this ingest reads version {SCHEMA_VERSION})")
    node = sample.get("node")
    if not isinstance(node, str) or not node:
        raise MalformedSample("missing field 'node'")
    for field in ("ts", "interval"):
        value = sample.get(field)
        if value is None or not _number_or_none(value):
            raise MalformedSample(f"node {node}: missing or non-numeric field {field!r}")
    gpus = sample.get("gpus")
    if not isinstance(gpus, list):
        raise MalformedSample(f"node {node}: missing field 'gpus'")
    for gpu in gpus:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            raise MalformedSample(f"node {node}: a GPU without an integer 'index'")
        get = gpu.get
        for name in GPU_METRIC_NAMES:
            if type(get(name)) not in _READING_TYPES:
                raise MalformedSample(f"node {node} GPU {gpu['index']}: {name!r} is not a number or null")
    return sample
