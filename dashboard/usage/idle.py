"""GPUs allocated but idle now, whose, and since when: the usage page's "top idle allocations" and the KPI.

Ingest updates it with each node's newest sample and that sample's frame rows,
whose FLAG_IDLE already says which GPUs are allocated and idle
(gpulse.usage.is_idle_allocated: by SM activity where the GPU reports it, else
utilization; a GPU with neither reading is not listed), and writes it to Redis
(Keys().idle_allocations) when it changed.
"Since" is when ingest first saw the GPU idle with this owner. A restarted
ingest resumes it from the list the previous one wrote (resume(), for the
MAX_LISTED longest idle): a GPU still idle with the same owner in its node's
first sample keeps its "since". A down node's GPUs leave the list (they are
not idle "now": nobody knows). The list holds every idle GPU; the KPI and the
usage page count one only once it has been idle GPULSE_IDLE_MIN_SECONDS
(idle_long_enough).

A GPU in MIG mode is listed by instance: an instance allocated and idle
(gpulse.usage.is_idle_allocated: by its SM activity; one without it is not
listed) is an entry of its own, with its ``mig_instance`` ("1/0"),
``mig_profile`` and ``share`` of the GPU (gpulse.usage.mig_split), which the
KPI and the page price it by. The GPU itself is not listed, whatever its frame
flag says: its processes are its instances'.
"""

import logging
import math

import orjson
from django.conf import settings

from dashboard.live.frames import FLAG_IDLE
from gpulse.usage import is_idle_allocated, mig_instance, mig_split, owner

MAX_LISTED = 1000  # the key is rewritten on a change: bound what one write carries

log = logging.getLogger("gpulse.ingest")


def idle_long_enough(since: float, now: float, min_seconds: float) -> bool:
    """Whether a GPU idle since ``since`` counts as an idle allocation at ``now``.

    A job's checkpoint or data-loading dip leaves its GPUs near 0 % for seconds:
    counted at once, they made the usage page list dozens of GPUs "idle" for
    3-16 s and the overview's KPI swing with each dip. Only a GPU idle with the
    same owner for GPULSE_IDLE_MIN_SECONDS counts; the list still holds the
    others, so their times are there when they pass it.
    """
    return now - since >= min_seconds


# Where an idle thing is on its node: (GPU index, its MIG instance, "" for the whole GPU).
Place = tuple[int, str]
# What the list holds of it: (since, user, job, pod, model, MIG profile, share of the GPU).
Entry = tuple[float, str, str, str, str, str, float]


class IdleAllocations:
    def __init__(self, min_seconds: float | None = None):
        self.min_seconds = settings.GPULSE_IDLE_MIN_SECONDS if min_seconds is None else min_seconds
        self.entries: dict[str, dict[Place, Entry]] = {}  # node -> place -> entry
        self.changed = True  # the first write replaces what an earlier ingest left
        # node -> place -> (since, (user, job, pod)) as an earlier ingest listed them; each
        # node's are used by its first sample, then dropped.
        self.earlier: dict[str, dict[Place, tuple[float, tuple]]] = {}

    def resume(self, raw: bytes | None) -> None:
        """Take the list an earlier ingest wrote (Redis' word: checked like any input; an entry that
        is not what ingest writes is skipped)."""
        try:
            listed = orjson.loads(raw) if raw else []
        except orjson.JSONDecodeError as exc:
            log.warning("the idle list in Redis is not JSON (%s): every idle GPU starts its time again", exc)
            return
        self.earlier = {}
        for entry in listed[:MAX_LISTED] if isinstance(listed, list) else ():
            if not isinstance(entry, dict):
                continue
            node, gpu, since = entry.get("node"), entry.get("gpu"), entry.get("since")
            who = (entry.get("user"), entry.get("job"), entry.get("pod"))
            instance = entry.get("mig_instance", "")  # absent in what an ingest before MIG wrote
            if (isinstance(node, str) and type(gpu) is int and isinstance(since, (int, float)) and math.isfinite(since)
                    and all(isinstance(part, str) for part in (*who, instance))):
                self.earlier.setdefault(node, {})[(gpu, instance)] = (float(since), who)

    def update(self, node: str, sample: dict, placed: float, rows: list) -> None:
        """Take the node's newest sample and its frame rows (flags last), GPU by GPU."""
        earlier = self.earlier.pop(node, None) if self.earlier else None
        idle = [i for i, row in enumerate(rows) if row[-1] & FLAG_IDLE]
        listed = self.entries.get(node)
        gpus = sample["gpus"]
        mig = [gpu for gpu in gpus if gpu.get("mig")]
        if not idle and not listed and not mig:  # most nodes, most of the time: nothing to look at
            return
        now: dict[Place, Entry] = {}

        def take(place: Place, held: dict, model: str, profile: str, share: float) -> None:
            who = owner(held)
            entry = listed.get(place) if listed else None
            if entry is None or entry[1:4] != who:
                since = placed
                if earlier and place in earlier and earlier[place][1] == who:
                    since = min(placed, earlier[place][0])
                entry = (since, *who, model, profile, share)
                self.changed = True
            now[place] = entry

        for i in idle:
            gpu = gpus[i]
            if not mig or gpu.get("mig") is None:  # a MIG GPU is listed by instance
                take((gpu["index"], ""), gpu, gpu.get("name") or "", "", 1.0)
        for gpu in mig:
            instances = gpu["mig"]
            idle_instances = [k for k, instance in enumerate(instances) if is_idle_allocated(instance)]
            if idle_instances:
                model = gpu.get("name") or ""
                shares = mig_split(model, instances)[0]
                for k in idle_instances:
                    take((gpu["index"], mig_instance(instances[k])), instances[k], model,
                         instances[k].get("profile") or "", shares[k])
        if listed and listed.keys() - now.keys():
            self.changed = True
        if now:
            self.entries[node] = now
        else:
            self.entries.pop(node, None)  # a MIG node is looked at with nothing listed

    def forget(self, node: str) -> None:
        if self.entries.pop(node, None):
            self.changed = True

    def by_model(self, now: float) -> dict[str, float]:
        """The GPUs idle at least min_seconds at ``now``, per GPU model (the KPI's count and cost): a MIG
        instance counts its share of its GPU."""
        counts: dict[str, float] = {}
        for listed in self.entries.values():
            for entry in listed.values():
                if idle_long_enough(entry[0], now, self.min_seconds):
                    counts[entry[4]] = counts.get(entry[4], 0) + entry[6]
        return counts

    def record(self) -> bytes:
        """The longest idle first, at most MAX_LISTED; clears ``changed``."""
        self.changed = False
        flat = [(entry, node, place) for node, listed in self.entries.items() for place, entry in listed.items()]
        flat.sort(key=lambda item: item[0][0])
        return orjson.dumps([
            {"node": node, "gpu": gpu, "mig_instance": instance, "mig_profile": profile, "share": share,
             "since": since, "user": user, "job": job, "pod": pod, "model": model}
            for (since, user, job, pod, model, profile, share), node, (gpu, instance) in flat[:MAX_LISTED]
        ])
