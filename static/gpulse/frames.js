/* The frame format of dashboard/live/frames.py, for the overview and the node
 * page: the names of a row's fields and the bits of its flags field. */
(function () {
  "use strict";

  // Frames name their fields; these are the fields of frames.py FIELDS, in order,
  // for rows that come without the list (the node page's recent points).
  // sm_active: SM activity in whole %, null where the GPU does not report it (before Hopper through NVML).
  const FIELDS = ["util", "mem_used", "temp", "power", "sm_clock", "sm_active", "flags"];
  // What each GPU's entry in a node's meta holds, in order (frames.py META_FIELDS).
  const META_FIELDS = ["model", "mem_total", "power_limit"];
  // What each MIG instance's row in a node's mig part holds, in order (frames.py MIG_FIELDS); the part
  // ({"<GPU position>": [row, ...]}) is there only on a node with a GPU in MIG mode.
  const MIG_FIELDS = ["gpu_instance", "compute_instance", "profile", "slices", "sm_active", "mem_used", "mem_total", "flags"];
  // At most this many instances of a GPU are read (gpulse/schema.py MAX_MIG_INSTANCES).
  const MAX_MIG_INSTANCES = 8;

  const FLAG = {
    LOST: 1,
    THROTTLED: 2, // a thermal or hardware slowdown or the power brake (not the power cap: a busy GPU sits there)
    XID: 4,
    ECC: 8,
    ALERT: 16, // an alert is firing on this GPU
    ALLOCATED: 32, // a process or a Kubernetes pod holds it (gpulse/usage.py)
    IDLE: 64, // allocated, not busy: SM activity below GPULSE_BUSY_SM_ACTIVITY where known, else utilization below GPULSE_BUSY_UTIL
    SM_IDLE: 128, // kernels run, SMs idle: utilization >= 90 %, SM activity < 20 % for a minute (gpulse/activity.py)
  };
  // A GPU with one of these is a fault the overview outlines and sorts first (with a down node's GPUs);
  // throttling is common and harmless, allocation is no fault.
  const FAULT = FLAG.LOST | FLAG.XID | FLAG.ECC | FLAG.ALERT;

  /* {field name: its position in a row}. */
  function indexFields(fields) {
    const index = {};
    fields.forEach(function (name, i) { index[name] = i; });
    return index;
  }

  window.GpulseFrames = {
    FIELDS: FIELDS, META: indexFields(META_FIELDS), MIG: indexFields(MIG_FIELDS), MAX_MIG_INSTANCES: MAX_MIG_INSTANCES,
    FLAG: FLAG, FAULT: FAULT, indexFields: indexFields,
  };
})();
