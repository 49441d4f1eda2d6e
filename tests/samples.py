"""Build version-1 samples for tests without a collector."""

import time

import orjson

from gpulse import schema
from gpulse.keys import Keys
from gpulse.schema import valid_node_name

H100_MEM = 85520809984


def gpu(index: int, util: float = 50, temp: float = 60, power: float = 400.0, **overrides) -> dict:
    reading = {
        "index": index, "uuid": f"GPU-{index:08d}", "name": "NVIDIA H100 80GB HBM3",
        "util": util, "mem_util": 30, "mem_used": 40 * 1024**3, "mem_total": H100_MEM,
        "temp": temp, "power": power, "power_limit": 700.0, "sm_clock": 1980, "mem_clock": 2619,
        "fan": None, "throttle": [], "ecc_uncorrected": 0, "xid": [],
        "pcie_tx": 1.2e9, "pcie_rx": 3.4e9, "nvlink_tx": None, "nvlink_rx": None, "processes": [],
    }
    reading.update(overrides)
    return reading


def sample(node: str, gpus: int = 2, ts: float | None = None, interval: float = 1.0, **gpu_overrides) -> dict:
    return {
        "v": 1, "node": node, "ts": time.time() if ts is None else ts, "interval": interval,
        "gpus": [gpu(i, **gpu_overrides) for i in range(gpus)],
        "host": {"cpu_util": 10.0, "mem_used": 1e10, "mem_total": 1e11},
    }


def stream_of(raw: bytes | str, node: str | None = None) -> str:
    """The telemetry stream a collector would XADD ``raw`` to: its node's own, or ``node``'s (for an entry
    that names none, or names another node)."""
    if node is None:
        try:  # as ingest reads it (which takes NaN and Infinity, as a collector's JSON may hold them)
            node = schema.read(raw)[0]["node"]
        except schema.MalformedSample:
            try:
                node = orjson.loads(raw).get("node")
            except (orjson.JSONDecodeError, AttributeError):
                node = None
        if not isinstance(node, str) or not valid_node_name(node):
            node = "unnamed"
    return Keys().telemetry_stream(node)
