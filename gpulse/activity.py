"""When a busy GPU is not doing much: NVML's utilization is the share of time any kernel ran, so one small
kernel running all the time reads 100 %; SM activity (GPM's SM_UTIL, DCGM_FI_PROF_SM_ACTIVE) is the share of
the SMs that had warps. A GPU at or above SM_IDLE_UTIL utilization with SM activity below SM_IDLE_ACTIVITY
runs kernels while its SMs are mostly idle: a stalled data loader, a job spinning on a barrier, a
kernel-launch-bound loop. Ingest flags it once that has held GPULSE_SM_IDLE_FOR seconds (SM_IDLE_FOR
by default; dashboard/activity/stage.py); an alert rule on gpu.sm_idle_busy with a `for` does the same.
"""

SM_IDLE_UTIL = 90.0  # % utilization
SM_IDLE_ACTIVITY = 0.20  # SM activity, a ratio as GPM and DCGM give it
SM_IDLE_FOR = 60.0  # seconds, the default of GPULSE_SM_IDLE_FOR


def kernels_run_sms_idle(gpu: dict) -> bool | None:
    """Whether the sample's GPU runs kernels nearly all the time while its SMs are mostly idle; None where
    either reading is unknown (a GPU without GPM: before Hopper, or under MIG)."""
    util, sm_active = gpu.get("util"), gpu.get("sm_active")
    if util is None or sm_active is None:
        return None
    return util >= SM_IDLE_UTIL and sm_active < SM_IDLE_ACTIVITY
