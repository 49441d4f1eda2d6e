"""The shared contract in gpulse/: node status and throttle reasons, the rules every part applies."""

import pynvml
import pytest

from gpulse.keys import node_ttl
from gpulse.status import DOWN, NODE_STATUSES, STALE, UP, node_status
from gpulse.throttle import REASON_BITS, THROTTLE_BITS, THROTTLE_REASONS, throttle_reasons

NVML_NAMES = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}


@pytest.mark.parametrize("interval", [0.5, 1.0, 2.0, 10.0])
def test_a_node_is_up_then_stale_after_two_intervals_then_down_when_its_key_expires(interval):
    ts = 1_000_000.0
    assert node_status(ts, interval, ts) == UP
    assert node_status(ts, interval, ts + 2 * interval) == UP
    assert node_status(ts, interval, ts + 2 * interval + 0.01) == STALE
    assert node_status(ts, interval, ts + node_ttl(interval)) == STALE
    assert node_status(ts, interval, ts + node_ttl(interval) + 0.01) == DOWN
    assert NODE_STATUSES == (UP, STALE, DOWN)


def test_the_throttle_table_is_nvml_s_clock_event_reason_bits():
    assert set(THROTTLE_REASONS) == set(NVML_NAMES)
    for bit, reason in THROTTLE_BITS.items():
        assert getattr(pynvml, f"nvmlClocksEventReason{NVML_NAMES[reason]}") == bit, reason
        assert REASON_BITS[reason] == bit
    assert sorted(THROTTLE_BITS) == list(THROTTLE_BITS)  # bit order, as samples list them


def test_a_mask_becomes_its_reason_names_in_bit_order_and_unnamed_bits_are_left_out():
    assert throttle_reasons(0) == []
    assert throttle_reasons(0x60) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert throttle_reasons(0x1FF) == list(THROTTLE_REASONS)
    # nvmlClocksThrottleReasonBoardLimit (0x200) has no name in samples.
    assert throttle_reasons(0x200 | 0x4) == ["sw_power_cap"]
