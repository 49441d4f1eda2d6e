"""Compact frames for browsers: one snapshot on connect, then one delta per tick.

A frame is JSON:

    {"type": "snapshot" | "delta", "seq": 42, "sent": 1764000000.4,
     "fields": ["util", "mem_used", "temp", "power", "sm_clock", "sm_active", "flags"],
     "nodes": {"gpu-01": {"ts": 1764000000.1, "interval": 1.0, "status": "up",
                          "gpus": [[97, 58368, 66, 612, 1980, 41, 0], ...],
                          "meta": [["H100 80GB HBM3", 81559, 700], ...]}},
     "summary": {"alerts_firing": 0, "jobs_running": 0, "jobs_queued": 0}}

Rows hold one value per name in ``fields``, rounded to display precision
(memory in MiB, power in whole watts, SM activity in whole % where the sample
has a ratio); null where the GPU does not report it (SM activity before Hopper
through NVML: never 0). ``flags`` is always last.
``meta`` (per GPU, META_FIELDS: model, memory total in MiB, power limit in W) comes with a
node's first row and whenever it changes. ``mig`` is present only on a node with a GPU in MIG
mode: {"<the GPU's position in gpus>": [instance row, ...]}, each row MIG_FIELDS (ids, profile,
slices, SM activity %, memory in MiB, flags ALLOCATED and IDLE), [] for MIG on with no
instance made; a GPU without MIG adds nothing. ``skew``
(seconds, the node's clock minus Redis') is present while the node's clock is
off by more than GPULSE_MAX_CLOCK_SKEW: its ``ts`` is then when its sample was
taken, not what its clock said. ``twin`` (unix seconds) is present while a
second collector reports as this node (dashboard.live.identity): since when;
only one collector's samples count. Ingest's stages (dashboard/live/stages.py)
add their own keys: ``probe``, the node's newest bandwidth probe ({"busbw",
"median" (of its earlier probes), "low", "status", "ts"}: dashboard/probes),
present once the node has been probed; ``health``, the node's verdict
(dashboard/health): {"verdict": "healthy"} or, for "degraded",
"failing" and "unknown" (down, or no health checks), {"verdict", "reason" (the
worst finding, e.g. "GPU 3 NVLink links: link 2 down, 17 up"), "action" (the
catalogue's, for that finding), "since" (unix seconds it has had this
verdict), "findings" (how many warn or fail findings)}, absent until ingest
has judged the node. ``forgotten`` (a delta's list of node names)
names nodes pruned after GPULSE_NODE_FORGET_AFTER: browsers drop them. A delta
carries only the nodes that sent a sample this tick (with their ``ts``) or
whose status, stage keys or stage flags changed. A down node's rows are all null:
its last values are never shown as if current.

``flags`` per GPU: 1 lost, 2 throttled, 4 Xid, 8 uncorrected ECC, 16 an alert
firing (set by the alerts stage), 32 allocated, 64 allocated but idle (SM activity below
GPULSE_BUSY_SM_ACTIVITY where the GPU reports it, else utilization below GPULSE_BUSY_UTIL;
gpulse/usage.py says what both mean), 128 kernels run while the SMs idle (dashboard/activity).
"""

import time
from collections.abc import Callable

import orjson

from dashboard.live.state import ClusterState, NodeState
from gpulse.status import DOWN
from gpulse.throttle import SLOWDOWNS
from gpulse.usage import BUSY_SM_ACTIVITY, BUSY_UTIL, mig_slices

FIELDS = ("util", "mem_used", "temp", "power", "sm_clock", "sm_active", "flags")
# What each GPU's entry in a node's ``meta`` holds, in order (node_meta()).
META_FIELDS = ("model", "mem_total", "power_limit")
# What each MIG instance's row in a node's ``mig`` holds, in order (mig_rows()).
MIG_FIELDS = ("gpu_instance", "compute_instance", "profile", "slices", "sm_active", "mem_used", "mem_total", "flags")

FLAG_LOST = 1
FLAG_THROTTLED = 2  # a thermal or hardware slowdown or the power brake (gpulse.throttle.SLOWDOWNS), not the power cap
FLAG_XID = 4
FLAG_ECC = 8
FLAG_ALERT = 16  # an alert is firing on this GPU (as of the previous tick: alerts are evaluated after the frame)
FLAG_ALLOCATED = 32  # gpulse.usage.is_allocated
FLAG_IDLE = 64  # allocated and not busy: gpulse.usage.is_idle_allocated
FLAG_SM_IDLE = 128  # kernels run, SMs idle for a minute: gpulse.activity (set by dashboard/activity/stage.py)

SLOWDOWN_REASONS = frozenset(SLOWDOWNS)
MIB = 1024 * 1024


def gpu_row(gpu: dict, busy_util: float = BUSY_UTIL, busy_sm_activity: float = BUSY_SM_ACTIVITY) -> list:
    """Return the GPU's row of FIELDS values at display precision."""
    # Called for every GPU of every sample: plain locals, no helper calls (the allocation
    # and busy tests are gpulse.usage.is_allocated's and is_busy's, inlined).
    flags = 0
    if gpu.get("lost"):
        return [None, None, None, None, None, None, flags | FLAG_LOST]
    throttle = gpu.get("throttle")
    if throttle and not SLOWDOWN_REASONS.isdisjoint(throttle):
        flags |= FLAG_THROTTLED
    if gpu.get("xid"):
        flags |= FLAG_XID
    if gpu.get("ecc_uncorrected"):
        flags |= FLAG_ECC
    get = gpu.get
    util, mem, temp, power, clock = get("util"), get("mem_used"), get("temp"), get("power"), get("sm_clock")
    sm_active = get("sm_active")
    if get("processes") or (k8s := get("k8s")) and k8s.get("pod"):
        flags |= FLAG_ALLOCATED
        # SM activity judges where it is known; a null utilization then is no verdict: neither idle nor busy.
        if (sm_active < busy_sm_activity / 100 if sm_active is not None
                else util is not None and util < busy_util):
            flags |= FLAG_IDLE
    return [
        None if util is None else round(util),
        None if mem is None else round(mem / MIB),
        None if temp is None else round(temp),
        None if power is None else round(power),
        None if clock is None else round(clock),
        None if sm_active is None else round(sm_active * 100),
        flags,
    ]


def mig_rows(instances: list, busy_sm_activity: float = BUSY_SM_ACTIVITY) -> list:
    """Return the MIG instances' rows of MIG_FIELDS values at display precision (a validated sample's "mig")."""
    rows = []
    for instance in instances:
        get = instance.get
        profile, sm_active = get("profile"), get("sm_active")
        flags = 0
        if get("processes") or (k8s := get("k8s")) and k8s.get("pod"):
            flags |= FLAG_ALLOCATED
            # An instance has no utilization: without SM activity, no verdict.
            if sm_active is not None and sm_active < busy_sm_activity / 100:
                flags |= FLAG_IDLE
        rows.append([
            get("gpu_instance"), get("compute_instance"), profile,
            mig_slices(profile),
            None if sm_active is None else round(sm_active * 100),
            _round(get("mem_used"), MIB), _round(get("mem_total"), MIB), flags,
        ])
    return rows


def node_mig(gpus: list, busy_sm_activity: float = BUSY_SM_ACTIVITY) -> dict:
    """Return the node's ``mig`` part: the GPU's position in ``gpus`` -> its instances' rows, for GPUs in MIG mode."""
    return {str(g): mig_rows(gpu["mig"], busy_sm_activity) for g, gpu in enumerate(gpus) if gpu.get("mig") is not None}


def node_meta(sample: dict) -> list:
    """Each GPU's META_FIELDS."""
    return [
        [
            (gpu.get("name") or "").removeprefix("NVIDIA "),
            _round(gpu.get("mem_total"), MIB),
            _round(gpu.get("power_limit")),
        ]
        for gpu in sample["gpus"]
    ]


def _round(value, scale=1):
    return None if value is None else round(value / scale)


def _with_flags(rows: list, gpus: list, flags: dict[int, int]) -> list:
    """Return ``rows`` with the stages' ``flags`` (GPU index -> bits) set; the cached rows stay as they are."""
    return [
        row[:-1] + [row[-1] | flags[gpu.get("index")]] if gpu.get("index") in flags else row
        for row, gpu in zip(rows, gpus, strict=False)
    ]


class FrameBuilder:
    """Turn ClusterState into frames, one delta and one snapshot per tick.

    Each node's rows are computed once per sample (and shared by the delta, the
    snapshot and the recent points) and its frame entry once per change; the
    snapshot reuses the cached entries of the nodes that did not change.
    """

    def __init__(self, busy_util: float = BUSY_UTIL, busy_sm_activity: float = BUSY_SM_ACTIVITY):
        # Below these (%) an allocated GPU is idle: SM activity where known, else utilization.
        self.busy_util = busy_util
        self.busy_sm_activity = busy_sm_activity
        self.seq = 0
        self._rows: dict[str, list] = {}  # node -> rows of its latest sample, without alert flags
        self._meta: dict[str, list] = {}
        self._mig: dict[str, dict] = {}  # node -> its ``mig`` part of its latest sample, for nodes with MIG only
        self._identity: dict[str, list] = {}  # node -> (name, mem_total, power_limit) of each GPU, as last seen
        self._new_meta: set[str] = set()  # nodes whose meta the browsers have not had in a delta
        self._entries: dict[str, dict] = {}  # node -> its entry as last framed, without meta
        self._flags: dict[str, dict[int, int]] = {}  # node -> GPU index -> the stages' flag bits, as last framed
        self._forgotten: set[str] = set()  # nodes pruned since the last delta

    def forget(self, name: str) -> None:
        """Drop a pruned node: the next delta names it in ``forgotten``, snapshots leave it out."""
        for cache in (self._rows, self._meta, self._mig, self._identity, self._entries, self._flags):
            cache.pop(name, None)
        self._new_meta.discard(name)
        self._forgotten.add(name)

    def update(self, node: NodeState) -> list:
        """Compute the rows of the node's new latest sample (ingest calls this as samples arrive,
        so the work is done before the tick's frame is due); return them without alert flags."""
        gpus = node.sample["gpus"]
        busy_util, busy_sm_activity = self.busy_util, self.busy_sm_activity
        rows = self._rows[node.name] = [gpu_row(gpu, busy_util, busy_sm_activity) for gpu in gpus]
        # A plain loop, not node_mig()'s comprehension, for the nodes without MIG: most, and each sample.
        for gpu in gpus:
            if "mig" in gpu and gpu["mig"] is not None:
                self._mig[node.name] = node_mig(gpus, busy_sm_activity)
                break
        else:
            if self._mig:
                self._mig.pop(node.name, None)
        # Models and limits rarely change: compare the raw readings, format only on a change.
        identity = [(gpu.get("name"), gpu.get("mem_total"), gpu.get("power_limit")) for gpu in gpus]
        if identity != self._identity.get(node.name):
            self._identity[node.name] = identity
            meta = node_meta(node.sample)
            if meta != self._meta.get(node.name):
                self._meta[node.name] = meta
                self._new_meta.add(node.name)
        return rows

    def rows_of(self, name: str) -> list:
        """Return the rows of the node's latest sample, without alert flags (its recent point)."""
        return self._rows[name]

    def _entry(self, node: NodeState, flags: dict[int, int] | None, fields: dict) -> dict:
        sample = node.sample
        rows = self._rows.get(node.name)
        if rows is None:  # known from before a restart, not sampled since
            rows = self.update(node)
        if node.status == DOWN:
            gpus = [[None] * len(FIELDS) for _ in rows]
        else:
            gpus = _with_flags(rows, sample["gpus"], flags) if flags else rows
        entry = {"ts": node.ts, "interval": sample["interval"], "status": node.status, "gpus": gpus}
        if node.status != DOWN and node.name in self._mig:
            entry["mig"] = self._mig[node.name]
        if node.skew is not None:
            entry["skew"] = round(node.skew, 1)
        if node.identity.twin_since is not None:
            entry["twin"] = node.identity.twin_since
        entry.update(fields)
        return entry

    def frames(self, state: ClusterState, sampled: set[str], changed: list[str], flags: dict[str, dict[int, int]],
               fields_of: Callable[[str], dict], summary: dict) -> tuple[bytes | None, bytes]:
        """Return (delta, snapshot): the delta frames the nodes that sent a sample (update() has
        their rows) or whose status or stage keys (``changed`` names them) or stage ``flags``
        (node -> GPU index -> bits) changed, and is None when there are none; the snapshot frames
        every node, meta included. ``fields_of(name)``: the keys the stages add to the node's entry."""
        self.seq += 1
        # Nodes never framed (known from before a restart) join the snapshot and this delta.
        touched = sampled.union(changed, state.nodes.keys() - self._entries.keys())
        for name in self._flags.keys() | flags.keys():
            if self._flags.get(name) != flags.get(name):
                touched.add(name)
        self._flags = flags

        delta_nodes = {}
        for name in touched:
            node = state.nodes.get(name)
            if node is None:
                continue
            entry = self._entries[name] = self._entry(node, flags.get(name), fields_of(name))
            if name in self._new_meta:
                entry = {**entry, "meta": self._meta[name]}
            delta_nodes[name] = entry
        self._new_meta.difference_update(delta_nodes)
        sent = time.time()
        snapshot_nodes = {name: {**self._entries[name], "meta": self._meta[name]} for name in state.nodes}
        delta = None
        if delta_nodes or self._forgotten:
            delta = self._encode("delta", sent, delta_nodes, summary, sorted(self._forgotten))
            self._forgotten.clear()
        return delta, self._encode("snapshot", sent, snapshot_nodes, summary)

    def _encode(self, kind: str, sent: float, nodes: dict, summary: dict, forgotten: list | None = None) -> bytes:
        frame = {"type": kind, "seq": self.seq, "sent": sent, "fields": FIELDS, "nodes": nodes, "summary": summary}
        if forgotten:
            frame["forgotten"] = forgotten
        return orjson.dumps(frame)
