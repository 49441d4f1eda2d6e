"""GPUs allocated but idle now, whose, and since when: the usage page's "top idle allocations" and the KPI.

Ingest updates it with each node's newest sample and that sample's frame rows,
whose FLAG_IDLE already says which GPUs are allocated and idle
(gpulse.usage.is_idle_allocated; a GPU without a utilization reading is not
listed), and writes it to Redis (Keys().idle_allocations) when it changed.
"Since" is when ingest first saw the GPU idle with this owner: a restarted
ingest starts counting again, and a down node's GPUs leave the list (they are
not idle "now": nobody knows).
"""

import orjson

from dashboard.live.frames import FLAG_IDLE
from gpulse.usage import owner

MAX_LISTED = 1000  # the key is rewritten on a change: bound what one write carries


class IdleAllocations:
    def __init__(self):
        # node -> GPU index -> (since, user, job, pod, model)
        self.entries: dict[str, dict[int, tuple[float, str, str, str, str]]] = {}
        self.changed = True  # the first write replaces what an earlier ingest left

    def update(self, node: str, sample: dict, placed: float, rows: list) -> None:
        """Take the node's newest sample and its frame rows (flags last), GPU by GPU."""
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
                entry = (placed, *who, gpu.get("name") or "")
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

    def by_model(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for listed in self.entries.values():
            for entry in listed.values():
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
