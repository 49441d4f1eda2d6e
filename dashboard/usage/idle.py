"""GPUs allocated but idle now, whose, and since when: the usage page's "top idle allocations" and the KPI.

Ingest updates it with each node's newest sample and that sample's frame rows,
whose FLAG_IDLE already says which GPUs are allocated and idle
(gpulse.usage.is_idle_allocated; a GPU without a utilization reading is not
listed), and writes it to Redis (Keys().idle_allocations) when it changed.
"Since" is when ingest first saw the GPU idle with this owner. A restarted
ingest resumes it from the list the previous one wrote (resume(), for the
MAX_LISTED longest idle): a GPU still idle with the same owner in its node's
first sample keeps its "since". A down node's GPUs leave the list (they are
not idle "now": nobody knows). The list holds every idle GPU; the KPI and the
usage page count one only once it has been idle GPULSE_IDLE_MIN_SECONDS
(idle_long_enough).
"""

import logging
import math

import orjson
from django.conf import settings

from dashboard.live.frames import FLAG_IDLE
from gpulse.usage import owner

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


class IdleAllocations:
    def __init__(self, min_seconds: float | None = None):
        self.min_seconds = settings.GPULSE_IDLE_MIN_SECONDS if min_seconds is None else min_seconds
        # node -> GPU index -> (since, user, job, pod, model)
        self.entries: dict[str, dict[int, tuple[float, str, str, str, str]]] = {}
        self.changed = True  # the first write replaces what an earlier ingest left
        # node -> GPU index -> (since, (user, job, pod)) as an earlier ingest listed them; each
        # node's are used by its first sample, then dropped.
        self.earlier: dict[str, dict[int, tuple[float, tuple]]] = {}

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
            if (isinstance(node, str) and type(gpu) is int and isinstance(since, (int, float)) and math.isfinite(since)
                    and all(isinstance(part, str) for part in who)):
                self.earlier.setdefault(node, {})[gpu] = (float(since), who)

    def update(self, node: str, sample: dict, placed: float, rows: list) -> None:
        """Take the node's newest sample and its frame rows (flags last), GPU by GPU."""
        earlier = self.earlier.pop(node, None) if self.earlier else None
        idle = [i for i, row in enumerate(rows) if row[-1] & FLAG_IDLE]
        listed = self.entries.get(node)
        if not idle and not listed:  # most nodes, most of the time: nothing to look at
            return
        gpus = sample["gpus"]
        now = {}
        for i in idle:
            gpu = gpus[i]
            who, index = owner(gpu), gpu["index"]
            entry = listed.get(index) if listed else None
            if entry is None or entry[1:4] != who:
                since = placed
                if earlier and index in earlier and earlier[index][1] == who:
                    since = min(placed, earlier[index][0])
                entry = (since, *who, gpu.get("name") or "")
                self.changed = True
            now[index] = entry
        if listed and listed.keys() - now.keys():
            self.changed = True
        if now:
            self.entries[node] = now
        else:
            del self.entries[node]

    def forget(self, node: str) -> None:
        if self.entries.pop(node, None):
            self.changed = True

    def by_model(self, now: float) -> dict[str, int]:
        """The GPUs idle at least min_seconds at ``now``, per GPU model (the KPI's count and cost)."""
        counts: dict[str, int] = {}
        for listed in self.entries.values():
            for entry in listed.values():
                if idle_long_enough(entry[0], now, self.min_seconds):
                    counts[entry[4]] = counts.get(entry[4], 0) + 1
        return counts

    def record(self) -> bytes:
        """The longest idle first, at most MAX_LISTED; clears ``changed``."""
        self.changed = False
        flat = [(entry, node, gpu) for node, listed in self.entries.items() for gpu, entry in listed.items()]
        flat.sort(key=lambda item: item[0][0])
        return orjson.dumps([
            {"node": node, "gpu": gpu, "since": since, "user": user, "job": job, "pod": pod, "model": model}
            for (since, user, job, pod, model), node, gpu in flat[:MAX_LISTED]
        ])
