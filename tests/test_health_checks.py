"""The collector's health checks: one test per rule, unknown on null readings, rates, windows, bounds."""

import pytest

from collectors.cli import check_health
from collectors.health_checks import CHECKED, HealthChecks
from gpulse.health import CHECKS, IB_COUNTER_WINDOW, XID_WINDOW
from gpulse.schema import MAX_FINDINGS, MAX_REASON, encode, parse

T0 = 1_800_000_000.0


def gpu(index: int = 0, **changes) -> dict:
    """A busy H100 whose every health reading is healthy, with ``changes``."""
    reading = {
        "index": index, "uuid": f"GPU-{index}", "name": "NVIDIA H100 80GB HBM3", "lost": False,
        "util": 90, "throttle": [], "xid": [], "ecc_uncorrected": 0,
        "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16, "pcie_replay": 0,
        "remapped_correctable": 0, "remapped_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
        "retired_pages": None, "retired_pending": None, "ecc_enabled": True, "ecc_pending": False,
        "persistence": True, "mig_enabled": False, "mig_pending": False, "compute_mode": "Default",
        "nvlink_links": 18, "nvlink_links_up": 18, "nvlink_errors": 0,
    }
    reading.update(changes)
    return reading


def port(name: str = "mlx5_0/1", **changes) -> dict:
    return {"port": name, "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400,
            "symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0, **changes}


def sample(gpus: list[dict] | None = None, node: str = "gpu-01", ib: list[dict] | None = None) -> dict:
    return {"v": 1, "node": node, "ts": T0, "interval": 1.0,
            "gpus": [gpu(i) for i in range(8)] if gpus is None else gpus,
            "ib": [port(f"mlx5_{i}/1") for i in range(4)] if ib is None else ib}


def findings(checks: HealthChecks, entry: dict, now: float = T0, check: str | None = None) -> list[tuple]:
    """Annotate ``entry``; return its findings as (check, gpu, status, reason), of ``check`` alone if given."""
    checks.annotate(entry, now)
    parse(encode(entry))  # every finding fits the contract
    return [(f["check"], f["gpu"], f["status"], f["reason"]) for f in entry["health"]["findings"]
            if check is None or f["check"] == check]


def one_gpu(**changes) -> dict:
    return sample([gpu(0, **changes)])


def test_a_healthy_node_has_no_findings_and_lists_every_gpu_and_node_check():
    entry = sample()
    assert findings(HealthChecks(), entry) == []
    assert entry["health"]["checked"] == CHECKED
    # gpu_tests is checked only where the collector is given a record (tests/test_gpu_test_record.py).
    assert set(CHECKED) == {c.id for c in CHECKS if c.scope in ("gpu", "node")} - {"gpu_tests"}


def test_a_narrow_pcie_link_fails_saying_lanes_and_generation():
    assert findings(HealthChecks(), one_gpu(pcie_width=8)) == [
        ("pcie_link", 0, "fail", "x8 of x16 lanes, Gen5 of Gen5")]


def test_a_lower_pcie_generation_warns_only_while_the_gpu_is_busy():
    assert findings(HealthChecks(), one_gpu(pcie_gen=3, util=0)) == []
    assert findings(HealthChecks(), one_gpu(pcie_gen=3, util=9)) == []
    assert findings(HealthChecks(), one_gpu(pcie_gen=3, util=10)) == [
        ("pcie_link", 0, "warn", "x16 of x16 lanes, Gen3 of Gen5 while busy (10 %)")]


def test_a_full_width_link_whose_generation_is_not_reported_is_unknown_and_a_narrow_one_still_fails():
    assert findings(HealthChecks(), one_gpu(pcie_gen=None)) == [
        ("pcie_link", 0, "unknown", "x16 of x16 lanes; PCIe link generation not reported")]
    assert findings(HealthChecks(), one_gpu(pcie_gen_max=None, pcie_width=4)) == [
        ("pcie_link", 0, "fail", "x4 of x16 lanes, generation not reported")]


def test_a_null_reading_is_unknown_for_that_gpu_never_pass():
    entry = sample([gpu(0), gpu(1, pcie_width=None)])
    [(check, index, status, reason)] = findings(HealthChecks(), entry)
    assert (check, index, status) == ("pcie_link", 1, "unknown")
    assert reason == "PCIe link width not reported (not supported by this GPU or this source)"


def test_a_reading_no_gpu_of_the_node_reports_is_one_unknown_for_the_node():
    entry = sample([gpu(i, ecc_enabled=None) for i in range(8)])
    assert findings(HealthChecks(), entry) == [
        ("ecc_mode", None, "unknown", "all 8 GPUs: ECC mode not reported (not supported by these GPUs or this source)")]


def test_a_source_without_health_readings_gets_unknowns_not_passes():
    bare = {"index": 0, "util": 50, "throttle": None, "xid": None, "ecc_uncorrected": None}
    entry = {"v": 1, "node": "dcgm-01", "ts": T0, "interval": 1.0, "gpus": [bare, {**bare, "index": 1}]}
    result = findings(HealthChecks(), entry)
    assert {check for check, *_ in result} == set(CHECKED) - {"gpu_count"}
    assert all(status == "unknown" and index is None for _, index, status, _ in result)


def test_pcie_replays_warn_above_8_per_minute_from_the_previous_reading():
    checks = HealthChecks()
    assert findings(checks, one_gpu(pcie_replay=100), T0) == []
    assert findings(checks, one_gpu(pcie_replay=108), T0 + 60) == []
    assert findings(checks, one_gpu(pcie_replay=128), T0 + 120) == [
        ("pcie_replay", 0, "warn", "20 PCIe replays per minute (128 since the driver loaded)")]
    assert findings(checks, one_gpu(pcie_replay=3), T0 + 180) == [], "a reset counter starts over"


def test_rates_are_kept_per_node_and_gpu():
    checks = HealthChecks()
    findings(checks, sample([gpu(0, pcie_replay=0), gpu(1, pcie_replay=500)], node="a"), T0)
    findings(checks, sample([gpu(0, pcie_replay=500)], node="b"), T0)
    assert findings(checks, sample([gpu(0, pcie_replay=500), gpu(1, pcie_replay=500)], node="a"), T0 + 60,
                    check="pcie_replay") == [("pcie_replay", 0, "warn",
                                              "500 PCIe replays per minute (500 since the driver loaded)")]
    assert findings(checks, sample([gpu(0, pcie_replay=500)], node="b"), T0 + 60) == []


def test_a_pending_row_remap_warns_and_a_failed_one_fails():
    assert findings(HealthChecks(), one_gpu(remap_pending=True, remapped_uncorrectable=2)) == [
        ("row_remap", 0, "warn",
         "a row remap waits for a GPU reset (rows remapped: 2 for uncorrectable errors, 0 for correctable)")]
    assert findings(HealthChecks(), one_gpu(remap_failure=True, remap_pending=True))[0][:3] == (
        "row_remap", 0, "fail")


def test_retired_pages_are_checked_on_gpus_without_row_remapping_only():
    no_remap = {"remap_pending": None, "remap_failure": None, "remapped_correctable": None,
                "remapped_uncorrectable": None}
    assert findings(HealthChecks(), one_gpu(**no_remap, retired_pages=3, retired_pending=False)) == []
    assert findings(HealthChecks(), one_gpu(**no_remap, retired_pages=3, retired_pending=True)) == [
        ("retired_pages", 0, "warn", "a page retirement waits for a reboot (3 retired)")]
    assert findings(HealthChecks(), one_gpu(**no_remap, retired_pages=60, retired_pending=False)) == [
        ("retired_pages", 0, "fail", "60 pages retired (the limit is 60)")]
    assert [f[:3] for f in findings(HealthChecks(), one_gpu(**no_remap))] == [
        ("row_remap", 0, "unknown"), ("retired_pages", 0, "unknown")]
    assert [f[:3] for f in findings(HealthChecks(), one_gpu(**no_remap, retired_pending=False))] == [
        ("retired_pages", 0, "unknown")]
    assert [f[:3] for f in findings(HealthChecks(), one_gpu(**no_remap, retired_pages=3))] == [
        ("retired_pages", 0, "unknown")]


def test_ecc_off_or_a_pending_mode_change_warns():
    assert findings(HealthChecks(), one_gpu(ecc_enabled=False)) == [("ecc_mode", 0, "warn", "ECC is off")]
    assert findings(HealthChecks(), one_gpu(ecc_pending=True)) == [
        ("ecc_mode", 0, "warn", "an ECC mode change waits for a reboot")]


def test_uncorrectable_ecc_errors_fail():
    assert findings(HealthChecks(), one_gpu(ecc_uncorrected=2)) == [
        ("ecc_uncorrected", 0, "fail", "2 uncorrectable ECC errors since the driver loaded")]


def test_a_link_down_while_others_are_up_fails_but_no_nvlink_at_all_passes():
    assert findings(HealthChecks(), one_gpu(nvlink_links_up=17)) == [
        ("nvlink_state", 0, "fail", "1 of 18 links down, 17 up")]
    assert findings(HealthChecks(), one_gpu(nvlink_links_up=0)) == []
    assert findings(HealthChecks(), one_gpu(nvlink_links=0, nvlink_links_up=0, nvlink_errors=None)) == []


def test_nvlink_errors_warn_above_one_per_second():
    checks = HealthChecks()
    assert findings(checks, one_gpu(nvlink_errors=10), T0) == []
    assert findings(checks, one_gpu(nvlink_errors=20), T0 + 10) == []
    assert findings(checks, one_gpu(nvlink_errors=50), T0 + 20) == [
        ("nvlink_errors", 0, "warn", "3.0 NVLink CRC, replay or recovery errors per second")]


def test_an_application_xid_warns_and_a_bus_xid_fails_with_nvidias_action():
    [(_, _, status, reason)] = findings(HealthChecks(), one_gpu(xid=[13]))
    assert status == "warn" and reason.startswith("Xid 13 (application): Graphics Engine Exception. Restart")
    [(_, _, status, reason)] = findings(HealthChecks(), one_gpu(xid=[79]))
    assert status == "fail" and reason.startswith("Xid 79 (bus): GPU has fallen off the bus. Drain the node and reboot")


def test_an_xid_stays_a_finding_for_15_minutes_after_it_was_last_reported():
    checks = HealthChecks()
    findings(checks, one_gpu(xid=[79]), T0)
    assert findings(checks, one_gpu(xid=[]), T0 + XID_WINDOW)[0][:3] == ("xid", 0, "fail")
    assert findings(checks, one_gpu(xid=[]), T0 + XID_WINDOW + 1) == []


def test_the_worst_xid_of_the_window_is_reported_not_the_application_xid_after_it():
    checks = HealthChecks()
    findings(checks, one_gpu(xid=[48]), T0)
    [(_, _, status, reason)] = findings(checks, one_gpu(xid=[45]), T0 + 1)
    assert status == "fail"
    assert reason.startswith("Xid 48 (memory): Double Bit ECC Error (and 1 other Xid in 15 minutes)")


def test_an_xid_not_in_the_catalogue_warns():
    [(_, _, status, reason)] = findings(HealthChecks(), one_gpu(xid=[999]))
    assert status == "warn" and reason.startswith("Xid 999 (unknown): not in gpulse's catalogue")


def test_a_source_that_reads_no_xids_is_unknown():
    assert [f[:3] for f in findings(HealthChecks(), one_gpu(xid=None))] == [("xid", 0, "unknown")]


def test_clock_slowdowns_warn_while_busy_only():
    assert findings(HealthChecks(), one_gpu(throttle=["hw_thermal_slowdown", "sw_power_cap"], util=95)) == [
        ("clocks", 0, "warn", "hardware thermal slowdown while busy (95 %)")]
    assert findings(HealthChecks(), one_gpu(throttle=["hw_power_brake_slowdown", "gpu_idle"], util=0)) == []
    assert findings(HealthChecks(), one_gpu(throttle=["sw_power_cap"], util=100)) == []


def test_configuration_problems_warn_in_one_finding():
    assert findings(HealthChecks(), one_gpu(persistence=False, compute_mode="Prohibited", mig_pending=True)) == [
        ("config", 0, "warn", "persistence mode off; compute mode Prohibited; a MIG mode change waits for a GPU reset")]
    assert [f[:3] for f in findings(HealthChecks(), one_gpu(persistence=None, compute_mode=None,
                                                            mig_pending=None))] == [("config", 0, "unknown")]


def test_a_gpu_gone_since_first_seen_fails_naming_it():
    checks = HealthChecks()
    assert findings(checks, sample()) == []
    without_3 = sample([gpu(i) for i in range(8) if i != 3])
    assert findings(checks, without_3) == [("gpu_count", 3, "fail", "GPU 3 missing: 7 of 8 on the bus")]
    assert findings(checks, sample()) == []


def test_a_lost_gpu_fails_once_not_once_per_check():
    lost = {"index": 5, "uuid": "GPU-5", "lost": True}
    entry = sample([gpu(i) for i in range(5)] + [lost] + [gpu(i) for i in range(6, 8)])
    assert findings(HealthChecks(), entry) == [("gpu_count", 5, "fail", "GPU 5 fell off the bus: 7 of 8 answer")]


def test_fewer_gpus_than_expected_from_the_start_fails_for_the_node():
    assert findings(HealthChecks(expected_gpus=8), sample([gpu(i) for i in range(7)])) == [
        ("gpu_count", None, "fail", "7 of 8 GPUs on the bus")]
    assert findings(HealthChecks(expected_gpus=8), sample()) == []


def test_an_ib_port_not_active_and_linkup_fails():
    entry = sample(ib=[port("mlx5_0/1"), port("mlx5_1/1", state="4: DOWN", phys_state="2: Polling")])
    assert findings(HealthChecks(), entry) == [("ib_port", None, "fail", "mlx5_1/1 DOWN/Polling")]


def test_every_ib_port_problem_is_in_one_finding_of_the_worst_status():
    entry = sample(ib=[port("mlx5_0/1", rate=200), port("mlx5_1/1", state="DOWN", phys_state="Disabled"),
                       port("mlx5_2/1", state="INIT", phys_state="LinkUp")])
    assert findings(HealthChecks(), entry) == [
        ("ib_port", None, "fail",
         "mlx5_1/1 DOWN/Disabled; mlx5_2/1 INIT/LinkUp; mlx5_0/1 at 200 Gb/s, the node's other ports at up to 400")]


def test_findings_name_each_check_and_gpu_once():
    entry = sample([gpu(0, pcie_width=None), gpu(1, pcie_width=4, xid=[79], ecc_uncorrected=3)] +
                   [gpu(i, pcie_width=None) for i in range(3, 8)],
                   ib=[port("mlx5_0/1", state="DOWN"), port("mlx5_1/1", rate=100)])
    keys = [(check, index) for check, index, *_ in findings(HealthChecks(expected_gpus=8), entry)]
    assert len(keys) == len(set(keys)) == 11


def test_an_ib_port_slower_than_the_others_warns():
    entry = sample(ib=[port("mlx5_0/1"), port("mlx5_1/1", rate=200)])
    assert findings(HealthChecks(), entry) == [
        ("ib_port", None, "warn", "mlx5_1/1 at 200 Gb/s, the node's other ports at up to 400")]


def test_rising_ib_error_counters_warn_for_5_minutes_after_the_last_rise():
    checks = HealthChecks()
    assert findings(checks, sample(ib=[port(symbol_error=4)]), T0) == []
    assert findings(checks, sample(ib=[port(symbol_error=9, link_downed=1)]), T0 + 1) == [
        ("ib_port", None, "warn", "mlx5_0/1 symbol_error rose by 5; mlx5_0/1 link_downed rose by 1")]
    assert len(findings(checks, sample(ib=[port(symbol_error=9, link_downed=1)]), T0 + 1 + IB_COUNTER_WINDOW)) == 1
    assert findings(checks, sample(ib=[port(symbol_error=9, link_downed=1)]), T0 + 2 + IB_COUNTER_WINDOW) == []


def test_ib_ports_a_source_does_not_read_are_unknown_and_none_at_all_pass():
    entry = sample()
    del entry["ib"]
    assert [f[:3] for f in findings(HealthChecks(), entry)] == [("ib_port", None, "unknown")]
    assert findings(HealthChecks(), sample(ib=[])) == []


def test_findings_are_bounded_keeping_the_worst():
    broken = [gpu(i, pcie_width=8, ecc_uncorrected=1, nvlink_links_up=3, ecc_enabled=False, persistence=False,
                  remap_pending=True) for i in range(256)]
    entry = sample(broken)
    result = findings(HealthChecks(), entry)
    assert len(result) == MAX_FINDINGS
    assert all(status == "fail" for _, _, status, _ in result[:3 * 256])
    assert all(len(reason) <= MAX_REASON for *_, reason in result)


@pytest.mark.parametrize("code", [8, 48, 79, 999, 2**31 - 1])
def test_every_xid_reason_fits_the_contract(code):
    checks = HealthChecks()
    findings(checks, one_gpu(xid=list(range(1, 64))), T0)
    [(_, _, _, reason)] = findings(checks, one_gpu(xid=[code]), T0 + 1)
    assert len(reason) <= MAX_REASON


def test_a_sample_whose_checks_break_is_sent_without_health_and_the_rest_are_checked(caplog):
    broken, fine = one_gpu(compute_mode=5), sample(node="gpu-02")
    check_health(HealthChecks(), [broken, fine])
    assert "health" not in broken and fine["health"]["findings"] == []
    assert "health checks of node gpu-01 failed" in caplog.text
