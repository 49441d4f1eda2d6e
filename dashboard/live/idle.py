"""GPUs allocated but idle now, whose, and since when: the usage page's "top idle allocations" and the KPI.

Ingest updates it with each node's newest sample and writes it to Redis
(Keys().idle_allocations) when it changed. "Since" is when ingest first saw
the GPU idle with this owner: a restarted ingest starts counting again, and a
down node's GPUs leave the list (they are not idle "now": nobody knows).
"""

import orjson

from gpulse.usage import BUSY_UTIL, owner

MAX_LISTED = 1000  # the key is rewritten on a change: bound what one write carries


class IdleAllocations:
    def __init__(self, busy_util: float = BUSY_UTIL):
        self.busy_util = busy_util
        # (node, gpu) -> (since, user, job, pod, model)
        self.entries: dict[tuple[str, int], tuple[float, str, str, str, str]] = {}
        self.changed = True  # the first write replaces what an earlier ingest left

    def update(self, node: str, sample: dict, placed: float) -> None:
        """Take the node's newest sample. Runs for every GPU every second: gpulse.usage's
        is_idle_allocated is inlined (tests/test_usage_accounting.py holds the two in step)."""
        entries, busy_util = self.entries, self.busy_util
        for gpu in sample["gpus"]:
            get = gpu.get
            processes, k8s = get("processes"), get("k8s")
            util = get("util")
            if (processes or k8s and k8s.get("pod")) and not get("lost"):
                if util is None:
                    continue  # no utilization reading: no verdict, the entry stays as it is
                if util < busy_util:
                    key, who = (node, gpu["index"]), owner(gpu)
                    entry = entries.get(key)
                    if entry is None or entry[1:4] != who:
                        entries[key] = (placed, *who, get("name") or "")
                        self.changed = True
                    continue
            if entries:
                key = (node, gpu["index"])
                if key in entries:
                    del entries[key]
                    self.changed = True

    def forget(self, node: str) -> None:
        for key in [key for key in self.entries if key[0] == node]:
            del self.entries[key]
            self.changed = True

    def by_model(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self.entries.values():
            counts[entry[4]] = counts.get(entry[4], 0) + 1
        return counts

    def record(self) -> bytes:
        """The longest idle first, at most MAX_LISTED; clears ``changed``."""
        self.changed = False
        listed = sorted(self.entries.items(), key=lambda item: item[1][0])[:MAX_LISTED]
        return orjson.dumps([
            {"node": node, "gpu": gpu, "since": since, "user": user, "job": job, "pod": pod, "model": model}
            for (node, gpu), (since, user, job, pod, model) in listed
        ])
