"""Clock throttle reasons: NVML's bitmask and the names a sample's "throttle" list carries.

NVML (nvmlDeviceGetCurrentClocksEventReasons) and dcgm-exporter
(DCGM_FI_DEV_CLOCKS_EVENT_REASONS) report the same bitmask; the simulated
fleet builds one. All three turn it into names through this table.
"""

# nvml.h's nvmlClocksEventReason* bits, in bit order, and the name each has in samples.
THROTTLE_BITS = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_REASONS = tuple(THROTTLE_BITS.values())
REASON_BITS = {reason: bit for bit, reason in THROTTLE_BITS.items()}
# The reasons that hold a GPU's clocks below what its power limit allows, in words: faults to look
# at (the clocks health check warns, the overview tags THR). sw_power_cap is not one: a busy GPU
# at its power limit is normal, and a real H100 under load sits there (docs/PERFORMANCE.md).
SLOWDOWNS = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_power_brake_slowdown": "power brake",
}


def throttle_reasons(mask: int) -> list[str]:
    """Return the names of the reasons set in ``mask``, in bit order; bits without a name are left out."""
    return [reason for bit, reason in THROTTLE_BITS.items() if mask & bit]
