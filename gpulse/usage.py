"""What a GPU's usage is: allocated or not, busy or not, and whose.

One definition for everything that counts usage: ingest's accounting
(dashboard/rollups/usage.py), the alert metric gpu.idle_allocated, the frames'
allocation flags and /metrics. It reads a validated sample's GPU (gpulse/schema.py).

- **Allocated**: a Kubernetes pod owns the GPU (the sample's ``k8s``) or a
  process holds a context, and so memory, on it.
- **Busy**: allocated and doing work. Where the GPU reports SM activity (GPM
  or DCGM's profiling, gpulse/schema.py ACTIVITY_METRICS), busy is SM activity
  at or above a threshold (default 10 %, the setting GPULSE_BUSY_SM_ACTIVITY):
  NVML's utilization reads 100 % while one tiny kernel runs all the time, so a
  stalled data loader looks busy by it. Elsewhere busy is utilization at or
  above a threshold (default 5 %, GPULSE_BUSY_UTIL). Below it the GPU holds
  work that is not running, a notebook left open or a job waiting on its data.
  Each usage row says which of the two judged most of its allocated time
  (``busy_by``: BY_SM_ACTIVITY or BY_UTILIZATION).
- **Owner**: (user, job, pod) of the process holding the most memory; the
  pod is "namespace/name" from ``k8s`` where the source maps it, else the
  process's pod UID. Any part the collector could not tell is "".
- **MIG**: each instance of a GPU in MIG mode (the sample's ``mig``) is a GPU of
  its own to the words above (its processes, its ``k8s``, its SM activity; it
  has no utilization), worth its share of the GPU (mig_split). The parent
  GPU's processes are its instances': the parent itself is never allocated.
"""

import functools
import re
from typing import NamedTuple

BUSY_UTIL = 5.0  # %
BUSY_SM_ACTIVITY = 10.0  # %, of the SMs' time with a warp resident (the sample's sm_active is a ratio 0-1)

# Which reading judged busy or idle (a usage row's ``busy_by``).
BY_SM_ACTIVITY = "sm_activity"
BY_UTILIZATION = "utilization"


# A GPU's compute slices in MIG mode (NVIDIA's MIG user guide, "Supported MIG Profiles"): 7 on the A100, H100,
# H200, B200 and GB200, 4 on the A30 (whose largest profile is 4g.24gb).
MIG_SLICES = 7
MIG_SLICES_BY_MODEL = ((re.compile(r"\bA30\b"), 4),)
# A profile's compute slices: "1c.3g.40gb" 1 (a compute instance of a 3-slice GPU instance), "3g.40gb" 3,
# "1g.10gb+me" 1.
PROFILE_SLICES = re.compile(r"(?:(\d)c\.)?(\d)g\.")


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


def is_busy(gpu: dict, busy_util: float = BUSY_UTIL, busy_sm_activity: float = BUSY_SM_ACTIVITY) -> bool | None:
    """Whether the GPU's work runs (allocated or not): by SM activity where it is reported, else by
    utilization; None without either."""
    sm_active = gpu.get("sm_active")
    if sm_active is not None:
        return sm_active >= busy_sm_activity / 100
    util = gpu.get("util")
    return None if util is None else util >= busy_util


def is_idle_allocated(gpu: dict, busy_util: float = BUSY_UTIL,
                      busy_sm_activity: float = BUSY_SM_ACTIVITY) -> bool | None:
    """True when allocated and not busy (is_busy); None when allocated and neither SM activity nor
    utilization is reported."""
    if gpu.get("lost") or not is_allocated(gpu):
        return False
    busy = is_busy(gpu, busy_util, busy_sm_activity)
    return None if busy is None else not busy


def busy_by(allocated_seconds: float, sm_activity_seconds: float) -> str | None:
    """Which measure judged most of a usage row's allocated seconds busy or idle (its ``busy_by``):
    BY_SM_ACTIVITY or BY_UTILIZATION; None for a row with no allocated time."""
    if not allocated_seconds:
        return None
    return BY_SM_ACTIVITY if sm_activity_seconds * 2 >= allocated_seconds else BY_UTILIZATION


def mig_slices(profile: str | None) -> int | None:
    """An instance's compute slices from its profile; None where the profile does not say."""
    match = PROFILE_SLICES.match(profile) if profile else None
    return None if match is None else int(match[1] or match[2])


def mig_split(model: str, instances: list) -> tuple[list[float], float]:
    """Each instance's share of its GPU (``model``: the GPU's name), in the order given, and the share no
    instance holds: its compute slices over the GPU's. An instance whose profile does not say counts one
    slice, the smallest; should the instances hold more slices than the model has (a model this does not
    know), they share the GPU by their slices, so the shares never add up to more than the GPU."""
    shares, free = _split(model, tuple(instance.get("profile") for instance in instances))
    return list(shares), free


@functools.lru_cache(maxsize=1024)  # a fleet has a few models and layouts; ingest asks for every reading
def _split(model: str, profiles: tuple) -> tuple[tuple[float, ...], float]:
    slices = [mig_slices(profile) or 1 for profile in profiles]
    held = sum(slices)
    total = max(held, next((count for pattern, count in MIG_SLICES_BY_MODEL if pattern.search(model)), MIG_SLICES))
    return tuple(count / total for count in slices), (total - held) / total


def mig_instance(instance: dict) -> str:
    """An instance's name in a usage row: its GPU instance id and compute instance id, "1/0" (nvidia-smi's GI ID
    and CI ID), or "1" where the source gives no compute instance (dcgm-exporter's GPU_I_ID)."""
    compute = instance.get("compute_instance")
    return f"{instance['gpu_instance']}" if compute is None else f"{instance['gpu_instance']}/{compute}"
