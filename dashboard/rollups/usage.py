"""Usage accounting: per GPU, minute and owner, the seconds allocated and busy and the energy.

Samples reach it through RollupAccumulator (dashboard/rollups/accumulator.py), in
stream order and only once, in the same per-GPU pass as the rollups, and its
rows are written in the same transaction as the rollups and their checkpoint:
the accounting inherits their guarantees (nothing lost across a crash, nothing
counted twice). gpulse/usage.py says what allocated, busy and owner mean.

- **Time**: each sample counts for the GPU the seconds ingest hands it as the
  sample's ``interval``: the time the stream saw pass since the node's
  previous sample, at most the interval the node claims
  (dashboard.live.identity.CountedTime), so a node that stops sending stops
  counting and one that claims an hour every second counts a second.
- **Energy**: the delta of the GPU's energy counter (mJ since the driver
  loaded) since the GPU's previous reading. Where there is no delta to take
  (the first reading after ingest starts, a counter that went backwards after
  a driver reload, a gap of more than MAX_GAP_INTERVALS, a reading older than
  the GPU's newest, no counter) or the delta is impossible (more than
  MAX_WATTS over the gap: a node is untrusted), it is power × those counted
  seconds.
- **Rows**: GpuUsage per (node, GPU, MIG instance, minute, owner); UsageHour the
  same summed per (hour, node, GPU model, owner, MIG profile), which the tables
  read; ClusterUsage per minute, which the chart reads. All three are summed
  from the same slots, in numpy, and written in one transaction.
- **MIG**: a GPU in MIG mode counts per instance (MigReadings): each instance is
  a slot of its own, owned by whoever runs on it, busy by its own SM activity
  (an instance has no utilization: without SM activity it is not busy, like a
  GPU with neither reading), its seconds and its share of the GPU's energy
  weighted by its share of the GPU's slices (gpulse.usage.mig_split). The
  slices no instance holds (all of them on a GPU with no instance made) count
  as the GPU's free row (MIG instance ""); the GPU's own processes, its
  instances', are not counted a second time. So a MIG GPU's rows add up to one
  GPU's seconds and its energy, as a whole GPU's do.

The per-GPU Python is the owner and a slot number (the sums' row, made on the
GPU's first reading with that owner in the minute); the sums themselves are
added in numpy once per fold, like the rollups'.
"""

import datetime as dt
import operator

import numpy as np

from gpulse.usage import NOBODY, is_allocated, mig_instance, mig_split, owner

MAX_GAP_INTERVALS = 3  # a longer gap: the node was away; its counter's delta is not this reading's
MAX_WATTS = 5000.0  # the contract's power bound (gpulse/schema.py): no GPU draws more
# A counter repeated between reads (every 10 s by default) carries at most this long in one delta:
# a node holding it for an hour could otherwise put the hour in one owner's minute.
MAX_COUNTER_HOLD = 60.0  # s

# The columns of MinuteUsage.sums; allocated and busy seconds follow from them and the slot's owner.
# ACTIVITY_SECONDS: the seconds judged busy or idle by SM activity rather than utilization (gpulse.usage.is_busy).
SAMPLES, SECONDS, BUSY_SECONDS, JOULES, ACTIVITY_SECONDS = range(5)
SUMS = 5


# (user, job, pod), as gpulse.usage.Owner; None: not allocated.
Who = tuple[str, str, str] | None


class MinuteUsage:
    """One minute's sums per (GPU id, owner), a "slot", each also in its UsageHour group
    (node, GPU model, owner)."""

    def __init__(self, start: dt.datetime):
        self.start = start
        self.slots: dict[tuple[int, str, Who], int] = {}  # (GPU id, MIG instance or "", owner) -> slot
        self.keys: list[tuple] = []  # per slot, its GpuUsage row's key: node, gpu, minute, user, job, pod, model
        self.mig: list[tuple[str, str]] = []  # per slot, the rest of it: mig_instance, mig_profile
        self.allocated: list[bool] = []  # per slot: its owner is not None
        self.groups: dict[tuple, int] = {}  # (node, GPU model, user, job, pod) -> group
        self.group_of: list[int] = []  # per slot
        # Allocated to nobody anyone could name, and at other times free: both are the row
        # (node, GPU, minute, "", "", ""). (free slot, allocated slot) pairs, summed into one row.
        self.shared_rows: list[tuple[int, int]] = []
        # Per GPU id, (mark, slot) of its newest reading (None before one); the mark is the owner,
        # or the pid of its one process. A list: read for every reading, it is faster than a dict.
        self.current: list[tuple[object, int] | None] = []
        # Per MIG GPU id, its newest reading's (mark, slot per instance, share per instance, slot of its
        # free slices, their share); MigReadings.mark says what the mark is.
        self.mig_current: dict[int, tuple] = {}
        self.sums = np.zeros((0, SUMS))

    def slot(self, gpu_id: int, mark: object, node: str, index: int, who: Who, model: str) -> int:
        """The slot of the GPU's readings with this owner, made on its first reading."""
        slot = self.current[gpu_id] = (mark, self.instance_slot(gpu_id, node, index, who, model))
        return slot[1]

    def instance_slot(self, gpu_id: int, node: str, index: int, who: Who, model: str, instance: str = "",
                      profile: str = "") -> int:
        """The slot of the readings of the GPU, or of its MIG ``instance`` (gpulse.usage.mig_instance), with
        this owner."""
        key = (gpu_id, instance, who)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = len(self.keys)
            named = who or NOBODY
            self.keys.append((node, index, self.start, *named, model))
            self.mig.append((instance, profile))
            self.allocated.append(who is not None)
            self.group_of.append(self.groups.setdefault((node, model, *named, profile), len(self.groups)))
            other = self.slots.get((gpu_id, instance, NOBODY if who is None else None)) if named == NOBODY else None
            if other is not None:
                self.shared_rows.append((slot, other) if who is None else (other, slot))
        return slot

    def add(self, slots: np.ndarray, seconds: np.ndarray, busy: np.ndarray, joules: np.ndarray,
            by_activity: np.ndarray) -> None:
        grow = len(self.keys) - len(self.sums)
        if grow > 0:
            self.sums = np.concatenate([self.sums, np.zeros((grow, SUMS))])
        # bincount adds up a slot's readings however often it appears, faster than ufunc.at.
        size = len(self.sums)
        for column, weights in ((SAMPLES, None), (SECONDS, seconds), (BUSY_SECONDS, seconds * busy),
                                (JOULES, joules), (ACTIVITY_SECONDS, seconds * by_activity)):
            self.sums[:, column] += np.bincount(slots, weights, minlength=size)

    def rows(self) -> tuple[list[tuple], dict[tuple, list], list]:
        """The minute's GpuUsage rows (node, gpu, minute, user, job, pod, model, then models.USAGE_SUMS, then
        mig_instance, mig_profile), its sums per UsageHour group (node, model, user, job, pod, mig_profile:
        USAGE_SUMS) and its total (USAGE_SUMS)."""
        sums, allocated = self.sums, np.array(self.allocated, dtype=float)
        table = np.column_stack((sums[:, SAMPLES], sums[:, SECONDS], sums[:, SECONDS] * allocated,
                                 sums[:, BUSY_SECONDS] * allocated, sums[:, ACTIVITY_SECONDS] * allocated,
                                 sums[:, JOULES]))
        by_group = np.zeros((len(self.groups), table.shape[1]))
        np.add.at(by_group, self.group_of, table)
        total = table.sum(axis=0).tolist()
        keys, mig = self.keys, self.mig
        if self.shared_rows:
            free, allocated_slot = (list(pair) for pair in zip(*self.shared_rows, strict=True))
            table[allocated_slot] += table[free]  # the free slot's allocated, busy and activity seconds are 0
            keep = np.ones(len(keys), dtype=bool)
            keep[free] = False
            kept = keep.tolist()
            table = table[keep]
            keys = [key for key, kept_it in zip(keys, kept, strict=True) if kept_it]
            mig = [part for part, kept_it in zip(mig, kept, strict=True) if kept_it]
        # One tuple per row, made by map and zip in C: key + sums + MIG instance and profile.
        columns = table.T.tolist()
        sums_of = zip(table[:, 0].astype(np.int64).tolist(), *columns[1:], strict=True)
        gpu_rows = list(map(operator.add, map(operator.add, keys, sums_of), mig))
        return gpu_rows, dict(zip(self.groups, by_group.tolist(), strict=True)), total


class MigReadings:
    """The MIG GPUs' readings of one fold: a usage reading per instance, beside its GPU's.

    The fold's arrays hold a reading per GPU (the rollups' too); a MIG GPU's
    is its free slices' (MinuteUsage's free slot, weighted by their share).
    spread() weights those and adds each instance's reading, which takes its
    GPU's seconds and energy times its share. A fleet without MIG never makes
    one (the fold's numpy is as it was).
    """

    def __init__(self):
        self.parent: list[int] = []  # per MIG GPU reading: its position in the fold
        self.parent_share: list[float] = []  # the share of its slices no instance holds
        self.position: list[int] = []  # per instance reading: its GPU's position in the fold
        self.slot: list[int] = []
        self.share: list[float] = []
        self.sm_active: list[float] = []  # NaN: not reported

    def add(self, usage: MinuteUsage, position: int, gpu_id: int, node: str, index: int, model: str,
            instances: list) -> int:
        """Take a MIG GPU's reading (``position`` in the fold); return its slot, its free slices'."""
        usage.current[gpu_id] = None  # its next reading, MIG or not, looks its owner up
        mark = self.mark(model, instances)
        newest = usage.mig_current.get(gpu_id)
        if newest is None or mark is None or newest[0] != mark:
            shares, free = mig_split(model, instances)
            slots = [usage.instance_slot(gpu_id, node, index, owner(instance) if is_allocated(instance) else None,
                                         model, mig_instance(instance), instance.get("profile") or "")
                     for instance in instances]
            # A GPU whose instances hold all its slices: spread() drops its reading, so it makes no row.
            free_slot = usage.instance_slot(gpu_id, node, index, None, model) if free else slots[-1]
            newest = usage.mig_current[gpu_id] = (mark, slots, shares, free_slot, free)
        _, slots, shares, free_slot, free = newest
        self.position += [position] * len(slots)
        self.slot += slots
        self.share += shares
        self.sm_active += [np.nan if (sm := instance.get("sm_active")) is None else sm for instance in instances]
        self.parent.append(position)
        self.parent_share.append(free)
        return free_slot

    @staticmethod
    def mark(model: str, instances: list) -> tuple | None:
        """What tells a reading's owners from its GPU's previous one: the model, and each instance's ids, profile
        and the pid of its one process (a pid reused by another owner within the minute counts as the first's,
        as on a whole GPU); None, to look the owners up, where an instance has several processes or a pod."""
        marks: list[object] = [model]
        for instance in instances:
            processes = instance.get("processes")
            if instance.get("k8s") or processes and len(processes) > 1:
                return None
            marks.append((instance.get("gpu_instance"), instance.get("compute_instance"), instance.get("profile"),
                          processes[0].get("pid") if processes else None))
        return tuple(marks)

    def spread(self, slots: np.ndarray, seconds: np.ndarray, busy: np.ndarray, joules: np.ndarray,
               by_activity: np.ndarray, minute_of: np.ndarray | None, busy_sm_activity: float) -> tuple:
        """The fold's usage arrays (a reading per GPU, as MinuteUsage.add takes them, and each reading's minute)
        with the MIG GPUs' readings weighted and their instances' added; a GPU whose instances hold all its
        slices leaves no reading of its own."""
        weight = np.ones(len(slots))
        weight[self.parent] = self.parent_share
        keep = weight > 0
        position, share = np.array(self.position, dtype=np.int64), np.array(self.share)
        sm_active = np.array(self.sm_active)
        measured = ~np.isnan(sm_active)
        return (np.concatenate([slots[keep], np.array(self.slot, dtype=slots.dtype)]),
                np.concatenate([(seconds * weight)[keep], seconds[position] * share]),
                np.concatenate([busy[keep], sm_active >= busy_sm_activity / 100]),  # NaN: not busy
                np.concatenate([(joules * weight)[keep], joules[position] * share]),
                np.concatenate([by_activity[keep], measured]),
                None if minute_of is None else np.concatenate([minute_of[keep], minute_of[position]]))


class EnergyCounters:
    """Each GPU's newest energy counter reading (by GPU id), to take the next reading's delta from.

    The nvml source reads the counter every few seconds and repeats it in between
    (collectors/nvml.py, ENERGY_READ_INTERVAL): a reading's delta is then 0, and
    the next read's covers the seconds since the counter last moved. So the
    delta is bounded by the time since that move (at most MAX_COUNTER_HOLD);
    whether the node was away, by the time since its previous reading.
    """

    def __init__(self):
        self.ts = np.zeros(0)  # NaN: no reading to take a delta from
        self.moved = np.zeros(0)  # when the counter last changed (NaN: not seen yet)
        self.counter = np.zeros(0)

    def joules(self, ids: np.ndarray, ts: np.ndarray, counter: np.ndarray, power: np.ndarray,
               interval: np.ndarray) -> np.ndarray:
        """The energy of each reading (in stream order; a NaN counter or power is a missing one)."""
        grow = int(ids.max(initial=-1)) + 1 - len(self.ts)
        if grow > 0:
            self.ts = np.concatenate([self.ts, np.full(grow, np.nan)])
            self.moved = np.concatenate([self.moved, np.full(grow, np.nan)])
            self.counter = np.concatenate([self.counter, np.full(grow, np.nan)])
        used = np.where(np.isnan(power), 0.0, power * interval)
        # A GPU read twice in one fold (a backlog after an outage) takes its readings in turns, in stream order.
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        first = np.r_[True, sorted_ids[1:] != sorted_ids[:-1]]
        turn = np.empty(len(ids), dtype=np.int64)
        turn[order] = np.arange(len(ids)) - np.maximum.accumulate(np.where(first, np.arange(len(ids)), 0))
        for k in range(int(turn.max(initial=-1)) + 1):
            these = np.flatnonzero(turn == k)
            gpu = ids[these]
            gap = ts[these] - self.ts[gpu]  # NaN without an earlier reading
            delta = counter[these] - self.counter[gpu]
            since_moved = np.minimum(ts[these] - self.moved[gpu], MAX_COUNTER_HOLD)  # NaN stays NaN
            trusted = (gap > 0) & (gap <= MAX_GAP_INTERVALS * interval[these]) & (delta >= 0) \
                & (delta <= MAX_WATTS * 1000 * since_moved)  # every comparison with a NaN is False
            used[these[trusted]] = delta[trusted] / 1000
            # A late reading must not move the reference back.
            newer = ~np.isnan(counter[these]) & ~(ts[these] <= self.ts[gpu])
            moved = newer & (counter[these] != self.counter[gpu])  # true for a first reading (NaN before)
            self.ts[gpu[newer]] = ts[these][newer]
            self.moved[gpu[moved]] = ts[these][moved]
            self.counter[gpu[newer]] = counter[these][newer]
        return used

    def forget(self, ids: list[int]) -> None:
        known = [i for i in ids if i < len(self.ts)]
        self.ts[known] = np.nan
        self.moved[known] = np.nan
        self.counter[known] = np.nan
