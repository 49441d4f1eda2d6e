"""Usage accounting: per GPU, minute and owner, the seconds allocated and busy and the energy.

Samples reach it through RollupAccumulator (dashboard/live/rollups.py), in
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
- **Rows**: GpuUsage per (node, GPU, minute, owner); UsageHour the same summed
  per (hour, node, GPU model, owner), which the tables read; ClusterUsage per
  minute, which the chart reads. All three are summed from the same slots, in
  numpy, and written in one transaction.

The per-GPU Python is the owner and a slot number (the sums' row, made on the
GPU's first reading with that owner in the minute); the sums themselves are
added in numpy once per fold, like the rollups'.
"""

import datetime as dt
import operator

import numpy as np

from gpulse.usage import NOBODY

MAX_GAP_INTERVALS = 3  # a longer gap: the node was away; its counter's delta is not this reading's
MAX_WATTS = 5000.0  # the contract's power bound (gpulse/schema.py): no GPU draws more
# A counter repeated between reads (every 10 s by default) carries at most this long in one delta:
# a node holding it for an hour could otherwise put the hour in one owner's minute.
MAX_COUNTER_HOLD = 60.0  # s

# The columns of MinuteUsage.sums; allocated and busy seconds follow from them and the slot's owner.
SAMPLES, SECONDS, BUSY_SECONDS, JOULES = range(4)


# (user, job, pod), as gpulse.usage.Owner; None: not allocated.
Who = tuple[str, str, str] | None


class MinuteUsage:
    """One minute's sums per (GPU id, owner), a "slot", each also in its UsageHour group
    (node, GPU model, owner)."""

    def __init__(self, start: dt.datetime):
        self.start = start
        self.slots: dict[tuple[int, Who], int] = {}
        self.keys: list[tuple] = []  # per slot, its GpuUsage row's key: node, gpu, minute, user, job, pod, model
        self.allocated: list[bool] = []  # per slot: its owner is not None
        self.groups: dict[tuple, int] = {}  # (node, GPU model, user, job, pod) -> group
        self.group_of: list[int] = []  # per slot
        # Allocated to nobody anyone could name, and at other times free: both are the row
        # (node, GPU, minute, "", "", ""). (free slot, allocated slot) pairs, summed into one row.
        self.shared_rows: list[tuple[int, int]] = []
        # Per GPU id, (mark, slot) of its newest reading (None before one); the mark is the owner,
        # or the pid of its one process. A list: read for every reading, it is faster than a dict.
        self.current: list[tuple[object, int] | None] = []
        self.sums = np.zeros((0, 4))

    def slot(self, gpu_id: int, mark: object, node: str, index: int, who: Who, model: str) -> int:
        """The slot of the GPU's readings with this owner, made on its first reading."""
        key = (gpu_id, who)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = len(self.keys)
            named = who or NOBODY
            self.keys.append((node, index, self.start, *named, model))
            self.allocated.append(who is not None)
            self.group_of.append(self.groups.setdefault((node, model, *named), len(self.groups)))
            other = self.slots.get((gpu_id, NOBODY) if who is None else (gpu_id, None)) if named == NOBODY else None
            if other is not None:
                self.shared_rows.append((slot, other) if who is None else (other, slot))
        self.current[gpu_id] = (mark, slot)
        return slot

    def add(self, slots: np.ndarray, seconds: np.ndarray, busy: np.ndarray, joules: np.ndarray) -> None:
        grow = len(self.keys) - len(self.sums)
        if grow > 0:
            self.sums = np.concatenate([self.sums, np.zeros((grow, 4))])
        # bincount adds up a slot's readings however often it appears, faster than ufunc.at.
        size = len(self.sums)
        for column, weights in ((SAMPLES, None), (SECONDS, seconds), (BUSY_SECONDS, seconds * busy),
                                (JOULES, joules)):
            self.sums[:, column] += np.bincount(slots, weights, minlength=size)

    def rows(self) -> tuple[list[tuple], dict[tuple, list], list]:
        """The minute's GpuUsage rows (node, gpu, minute, user, job, pod, model, then models.USAGE_SUMS),
        its sums per UsageHour group (``groups``' key: USAGE_SUMS) and its total (USAGE_SUMS)."""
        sums, allocated = self.sums, np.array(self.allocated, dtype=float)
        table = np.column_stack((sums[:, SAMPLES], sums[:, SECONDS], sums[:, SECONDS] * allocated,
                                 sums[:, BUSY_SECONDS] * allocated, sums[:, JOULES]))
        by_group = np.zeros((len(self.groups), table.shape[1]))
        np.add.at(by_group, self.group_of, table)
        total = table.sum(axis=0).tolist()
        keys = self.keys
        if self.shared_rows:
            free, allocated_slot = (list(pair) for pair in zip(*self.shared_rows, strict=True))
            table[allocated_slot] += table[free]  # the free slot's allocated and busy seconds are 0
            keep = np.ones(len(keys), dtype=bool)
            keep[free] = False
            table, keys = table[keep], [key for key, kept in zip(keys, keep.tolist(), strict=True) if kept]
        # One tuple per row, made by map and zip in C: key + sums.
        columns = table.T.tolist()
        gpu_rows = list(map(operator.add, keys, zip(table[:, 0].astype(np.int64).tolist(), *columns[1:], strict=True)))
        return gpu_rows, dict(zip(self.groups, by_group.tolist(), strict=True)), total


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
