"""What a GPU's usage is: allocated or not, busy or not, and whose.

One definition for everything that counts usage: ingest's accounting
(dashboard/live/usage.py), the alert metric gpu.idle_allocated, the frames'
allocation flags and /metrics. It reads a validated sample's GPU (gpulse/schema.py).

- **Allocated**: a Kubernetes pod owns the GPU (the sample's ``k8s``) or a
  process holds a context, and so memory, on it.
- **Busy**: allocated and its utilization at or above a threshold (default
  5 %, the setting GPULSE_BUSY_UTIL): below it the GPU holds work that is not
  running, a notebook left open or a job waiting on its data.
- **Owner**: (user, job, pod) of the process holding the most memory; the
  pod is "namespace/name" from ``k8s`` where the source maps it, else the
  process's pod UID. Any part the collector could not tell is "".
"""

from typing import NamedTuple

BUSY_UTIL = 5.0


class Owner(NamedTuple):
    user: str
    job: str
    pod: str


NOBODY = Owner("", "", "")


def _pod(gpu: dict, process: dict | None) -> str:
    k8s = gpu.get("k8s")
    if k8s and k8s.get("pod"):
        return f"{k8s.get('namespace') or ''}/{k8s['pod']}"
    return (process or {}).get("pod_uid") or ""


def is_allocated(gpu: dict) -> bool:
    k8s = gpu.get("k8s")
    return bool(gpu.get("processes")) or bool(k8s and k8s.get("pod"))


def owner(gpu: dict) -> Owner:
    """Whose the GPU is; NOBODY when it is not allocated."""
    processes = gpu.get("processes")
    if not processes:
        pod = _pod(gpu, None)
        return Owner("", "", pod) if pod else NOBODY
    main = processes[0] if len(processes) == 1 else max(processes, key=lambda process: process.get("mem_used") or 0)
    return Owner(main.get("user") or "", main.get("job") or "", _pod(gpu, main))


def is_idle_allocated(gpu: dict, busy_util: float = BUSY_UTIL) -> bool | None:
    """True when allocated and below the busy threshold; None when allocated and utilization is not reported."""
    if gpu.get("lost") or not is_allocated(gpu):
        return False
    util = gpu.get("util")
    if util is None:
        return None
    return util < busy_util
