"""Compact frames for browsers: one snapshot on connect, then one delta per tick.

A frame is JSON:

    {"type": "snapshot" | "delta", "seq": 42, "sent": 1764000000.4,
     "fields": ["util", "mem_used", "temp", "power", "sm_clock", "flags"],
     "nodes": {"gpu-01": {"ts": 1764000000.1, "interval": 1.0, "status": "up",
                          "gpus": [[97, 58368, 66, 612, 1980, 0], ...],
                          "meta": [["H100 80GB HBM3", 81559, 700], ...]}},
     "summary": {"alerts_firing": 0, "jobs_running": 0, "jobs_queued": 0}}

Rows hold one value per name in ``fields``, rounded to display precision
(memory in MiB, power in whole watts); null where the GPU does not report it.
``meta`` (model, memory total in MiB, power limit in W, per GPU) comes with a
node's first row and whenever it changes. ``probe`` is the node's newest
bandwidth probe: {"busbw", "median" (of its earlier probes), "low", "status",
"ts"} (dashboard.live.probes), present once the node has been probed. A delta carries only the nodes that
sent a sample this tick (with their ``ts``) or changed status. A down node's
rows are all null: its last values are never shown as if current.
"""

import time

import orjson

from dashboard.live.state import DOWN, ClusterState, NodeState

FIELDS = ("util", "mem_used", "temp", "power", "sm_clock", "flags")

FLAG_LOST = 1
FLAG_THROTTLED = 2  # a thermal or power slowdown is active
FLAG_XID = 4
FLAG_ECC = 8
FLAG_ALERT = 16  # an alert is firing on this GPU

SLOWDOWN_REASONS = frozenset(
    ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
)
MIB = 1024 * 1024


def _round(value, scale=1):
    return None if value is None else round(value / scale)


def gpu_row(gpu: dict, alerting: bool) -> list:
    flags = FLAG_ALERT if alerting else 0
    if gpu.get("lost"):
        return [None, None, None, None, None, flags | FLAG_LOST]
    if SLOWDOWN_REASONS.intersection(gpu.get("throttle") or ()):
        flags |= FLAG_THROTTLED
    if gpu.get("xid"):
        flags |= FLAG_XID
    if gpu.get("ecc_uncorrected"):
        flags |= FLAG_ECC
    return [
        _round(gpu.get("util")),
        _round(gpu.get("mem_used"), MIB),
        _round(gpu.get("temp")),
        _round(gpu.get("power")),
        _round(gpu.get("sm_clock")),
        flags,
    ]


def node_meta(sample: dict) -> list:
    return [
        [(gpu.get("name") or "").removeprefix("NVIDIA "), _round(gpu.get("mem_total"), MIB), _round(gpu.get("power_limit"))]
        for gpu in sample["gpus"]
    ]


class FrameBuilder:
    """Turn ClusterState into frames, remembering which meta each browser already has."""

    def __init__(self):
        self.seq = 0
        self._meta: dict[str, list] = {}

    def _node_entry(self, node: NodeState, firing: set, probes: dict, with_meta: bool) -> dict:
        sample = node.sample
        entry = {
            "ts": sample["ts"],
            "interval": sample["interval"],
            "status": node.status,
            "gpus": [gpu_row(g, (node.name, g["index"]) in firing) for g in sample["gpus"]],
        }
        if node.status == DOWN:
            entry["gpus"] = [[None] * len(FIELDS) for _ in sample["gpus"]]
        if node.name in probes:
            entry["probe"] = probes[node.name]
        meta = node_meta(sample)
        if with_meta or meta != self._meta.get(node.name):
            entry["meta"] = meta
            self._meta[node.name] = meta
        return entry

    def delta(self, state: ClusterState, sampled: set[str], changed: list[str], firing: set, probes: dict,
              summary: dict) -> bytes:
        """Frame the nodes that sent a sample or whose status or probe changed."""
        self.seq += 1
        touched = sampled.union(changed)
        nodes = {name: self._node_entry(state.nodes[name], firing, probes, with_meta=False) for name in touched}
        return self._encode("delta", nodes, summary)

    def snapshot(self, state: ClusterState, firing: set, probes: dict, summary: dict) -> bytes:
        nodes = {name: self._node_entry(node, firing, probes, with_meta=True) for name, node in state.nodes.items()}
        return self._encode("snapshot", nodes, summary)

    def _encode(self, kind: str, nodes: dict, summary: dict) -> bytes:
        return orjson.dumps(
            {"type": kind, "seq": self.seq, "sent": time.time(), "fields": FIELDS, "nodes": nodes, "summary": summary}
        )
