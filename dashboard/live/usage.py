"""Usage accounting: per GPU, minute and owner, the seconds allocated and busy and the energy.

Samples reach it through RollupAccumulator (dashboard/live/rollups.py), in
stream order and only once, and its rows are written in the same transaction
as the rollups and their checkpoint: the accounting inherits their guarantees
(nothing lost across a crash, nothing counted twice). gpulse/usage.py says what
allocated, busy and owner mean.

- **Time**: each sample counts its ``interval`` seconds for the GPU, so a node
  that stops sending stops counting.
- **Energy**: the delta of the GPU's energy counter (mJ since the driver
  loaded) since the node's previous sample. Where there is no delta to take
  (the first sample after ingest starts, a counter that went backwards after
  a driver reload, a gap of more than MAX_GAP_INTERVALS, a sample older than
  the node's newest, a GPU without the counter) or the delta is impossible (more than MAX_WATTS over the gap: a
  node is untrusted), it is power × interval.
- **Rows**: GpuUsage per (node, GPU, minute, owner); UsageHour the same summed
  per (hour, node, GPU model, owner), which the tables read; ClusterUsage per
  minute, which the chart reads. All three come from the same sums, so they
  agree to the float.
"""

import datetime as dt
from collections.abc import Iterator

from gpulse.usage import BUSY_UTIL, owner

MAX_GAP_INTERVALS = 3  # a longer gap: the node was away; its counter's delta is not this sample's
MAX_WATTS = 5000.0  # the contract's power bound (gpulse/schema.py): no GPU draws more

# Per key: samples, seconds, allocated seconds, busy seconds, joules (models.USAGE_SUMS order).
Sums = list


class MinuteUsage:
    """One minute's sums per (node, GPU, owner), and each GPU's model."""

    def __init__(self):
        self.sums: dict[tuple[str, int, str, str, str], Sums] = {}
        self.models: dict[tuple[str, int], str] = {}

    def samples(self) -> int:
        return sum(sums[0] for sums in self.sums.values())


class UsageAccumulator:
    """Gathers usage per minute; rows() gives what rollup_store merges into the three tables."""

    def __init__(self, busy_util: float = BUSY_UTIL):
        self.busy_util = busy_util
        # node -> (ts, {GPU index: energy counter mJ}) of its newest sample with counters
        self.last_energy: dict[str, tuple[float, dict[int, float]]] = {}
        self.minutes: dict[int, MinuteUsage] = {}

    def add(self, minute: int, sample: dict) -> None:
        """Count one sample. The loop runs for every GPU of the cluster every second, so gpulse.usage's
        definitions are inlined here (tests/test_usage_accounting.py holds the two in step)."""
        bucket = self.minutes.get(minute)
        if bucket is None:
            bucket = self.minutes[minute] = MinuteUsage()
        node, ts, interval = sample["node"], sample["ts"], sample["interval"]
        busy_util, sums_of, models = self.busy_util, bucket.sums, bucket.models
        previous = self.last_energy.get(node)
        counters: dict[int, float] = {}
        earlier: dict[int, float] = {}  # the counters a delta may be taken from: none after a gap or out of order
        most = 0.0  # the largest delta a GPU can make over the gap, in mJ
        if previous is not None and 0 < ts - previous[0] <= MAX_GAP_INTERVALS * interval:
            earlier = previous[1]
            most = MAX_WATTS * 1000 * (ts - previous[0])
        for gpu in sample["gpus"]:
            get = gpu.get
            if get("lost"):
                continue
            index = gpu["index"]
            processes, k8s = get("processes"), get("k8s")
            if k8s is None and processes and len(processes) == 1:  # the common case, owner() without its calls
                process = processes[0]
                key = (node, index, process.get("user") or "", process.get("job") or "", process.get("pod_uid") or "")
            elif processes or k8s and k8s.get("pod"):
                key = (node, index, *owner(gpu))
            else:
                key = None
            if key is None:  # nobody's: its energy still counts, for its node
                key, allocated, busy = (node, index, "", "", ""), 0.0, 0.0
            else:
                util = get("util")
                allocated = interval
                busy = interval if util is not None and util >= busy_util else 0.0
            counter = get("energy")
            used = None
            if counter is not None:
                counters[index] = counter
                before = earlier.get(index)
                if before is not None and 0 <= counter - before <= most:
                    used = (counter - before) / 1000
            if used is None:
                power = get("power")
                used = power * interval if power is not None else 0.0
            sums = sums_of.get(key)
            if sums is None:
                sums = sums_of[key] = [0, 0.0, 0.0, 0.0, 0.0]
                models[(node, index)] = get("name") or ""
            sums[0] += 1
            sums[1] += interval
            sums[2] += allocated
            sums[3] += busy
            sums[4] += used
        if counters and (previous is None or ts > previous[0]):  # a late sample must not move the reference back
            self.last_energy[node] = (ts, counters)

    def forget(self, node: str) -> None:
        self.last_energy.pop(node, None)

    def drop(self, minute: int) -> int:
        """Forget an unwritten minute (the rollups' bound); return its GPU samples."""
        bucket = self.minutes.pop(minute, None)
        return bucket.samples() if bucket is not None else 0

    def clear(self) -> None:
        self.minutes = {}

    def gpu_rows(self) -> Iterator[tuple]:
        """GpuUsage rows: node, gpu, minute, user, job, pod, model, then the sums."""
        for minute, bucket in sorted(self.minutes.items()):
            start = dt.datetime.fromtimestamp(minute, dt.UTC)
            for (node, gpu, user, job, pod), sums in bucket.sums.items():
                yield (node, gpu, start, user, job, pod, bucket.models[(node, gpu)], *sums)

    def hour_rows(self) -> list[tuple]:
        """UsageHour rows: hour, node, model, user, job, pod, then the sums."""
        hours: dict[tuple, Sums] = {}
        for minute, bucket in self.minutes.items():
            hour, models = minute - minute % 3600, bucket.models
            for (node, gpu, user, job, pod), sums in bucket.sums.items():
                key = (hour, node, models[(node, gpu)], user, job, pod)
                into = hours.get(key)
                if into is None:
                    hours[key] = sums.copy()
                else:  # a node's GPUs mostly share their owner: most keys come here
                    into[0] += sums[0]
                    into[1] += sums[1]
                    into[2] += sums[2]
                    into[3] += sums[3]
                    into[4] += sums[4]
        return [(dt.datetime.fromtimestamp(key[0], dt.UTC), *key[1:], *sums) for key, sums in hours.items()]

    def cluster_rows(self) -> list[tuple]:
        """ClusterUsage rows: minute, then the sums."""
        return [(dt.datetime.fromtimestamp(minute, dt.UTC),
                 *(sum(column) for column in zip(*bucket.sums.values(), strict=True)))
                for minute, bucket in sorted(self.minutes.items()) if bucket.sums]
