"""The Xid catalogue: kind, severity and action of the Xids an operator meets, and unknown codes."""

import pytest

from gpulse.health import FAIL, WARN
from gpulse.schema import MAX_REASON
from gpulse.xid import KINDS, XIDS, classify


@pytest.mark.parametrize("code", [8, 13, 31, 43, 45])
def test_application_xids_warn_and_never_say_to_drain(code):
    info = classify(code)
    assert (info.kind, info.severity) == ("application", WARN)
    assert "Drain" not in info.action


@pytest.mark.parametrize("code, kind", [
    (48, "memory"), (64, "memory"), (95, "memory"), (74, "nvlink"), (79, "bus"), (119, "gsp"), (120, "gsp"),
])
def test_xids_that_need_a_reset_reboot_or_repair_fail(code, kind):
    info = classify(code)
    assert (info.kind, info.severity) == (kind, FAIL)
    assert info.action.startswith("Drain the node")


@pytest.mark.parametrize("code", [63, 92, 94])
def test_memory_xids_nvidia_says_need_no_reset_only_warn(code):
    info = classify(code)
    assert (info.kind, info.severity) == ("memory", WARN)


def test_xid_79_says_to_reboot_and_48_to_check_row_remapping():
    assert "reboot" in classify(79).action
    assert classify(79).description == "GPU has fallen off the bus"
    assert "ROW_REMAPPER" in classify(48).action


def test_an_xid_not_in_the_catalogue_warns_and_points_to_nvidias():
    info = classify(999)
    assert (info.code, info.kind, info.severity) == (999, "unknown", WARN)
    assert "docs.nvidia.com/deploy/xid-errors" in info.action


def test_every_entry_has_a_known_kind_an_action_and_fits_a_finding():
    for code, info in XIDS.items():
        assert info.code == code and info.kind in KINDS and info.severity in (WARN, FAIL)
        reason = f"Xid {code} ({info.kind}): {info.description} (and 63 other Xids in 15 minutes). {info.action}"
        assert len(reason) <= MAX_REASON, code
