"""The health part of the sample contract: the readings behind the checks, `system`, `ib` and `health`.

Each entry goes through both read()'s fast gate and validate() (read_both), which must agree.
"""

import pytest

from gpulse import health, schema
from tests.samples import sample
from tests.test_ingest_schema import read, rejects
from tests.test_schema_fast_path import goes_to_validate, takes_the_fast_path

HEALTHY_READINGS = {
    "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
    "remapped_correctable": 0, "remapped_uncorrectable": 0, "retired_pages": None,
    "nvlink_links": 18, "nvlink_links_up": 18,
    "remap_pending": False, "remap_failure": False, "retired_pending": None, "ecc_enabled": True,
    "ecc_pending": False, "persistence": True, "mig_enabled": False, "mig_pending": False,
    "vbios": "96.00.89.00.01", "compute_mode": "Default",
}


def checked_sample(**node_fields) -> dict:
    entry = sample("gpu-07", gpus=2, ts=1.7e9, **HEALTHY_READINGS)
    entry["system"] = {"driver": "550.54.15", "cuda": "12.4", "group": "h100-partition"}
    entry["ib"] = [{"port": "mlx5_0/1", "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400,
                    "symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0},
                   {"port": "mlx5_1/1", "state": "DOWN", "phys_state": "Polling", "rate": None,
                    "symbol_error": None, "link_downed": None, "port_rcv_errors": None}]
    entry["health"] = {"checked": [check.id for check in health.CHECKS if check.scope != health.CLUSTER],
                       "findings": [{"check": "nvlink_state", "gpu": 1, "status": "fail",
                                     "reason": "link 2 down, 17 up"},
                                    {"check": "ib_port", "gpu": None, "status": "fail",
                                     "reason": "mlx5_1/1 DOWN (Polling)"},
                                    {"check": "retired_pages", "gpu": 0, "status": "unknown",
                                     "reason": "NVML does not report retired pages"}]}
    entry.update(node_fields)
    return entry


def test_a_sample_with_every_health_reading_and_result_takes_the_fast_path_unchanged():
    entry = checked_sample()
    assert takes_the_fast_path(schema.encode(entry)) == entry


def test_the_health_parts_are_optional():
    entry = sample("gpu-07", gpus=1)
    assert read(schema.encode(entry))[0] == entry
    assert read(schema.encode({**entry, "system": None, "ib": None, "health": None}))[0]["health"] is None


@pytest.mark.parametrize("field, value, reason", [
    ("remap_pending", 1, "'remap_pending' is not true, false or null"),
    ("ecc_enabled", "yes", "'ecc_enabled' is not true, false or null"),
    ("compute_mode", 0, "'compute_mode' is not a string"),
    ("vbios", "9" * 200, "'vbios' is not a string of at most 128"),
])
def test_a_health_reading_of_the_wrong_type_rejects_the_entry(field, value, reason):
    entry = checked_sample()
    entry["gpus"][0][field] = value
    rejects(entry, reason)


@pytest.mark.parametrize("field, value, reason", [
    ("system", "550.54.15", "'system' is not an object"),
    ("system", {"driver": 550}, "'system driver' is not a string"),
    ("system", {"driver": "550.54.15", "group": ["a", "b"]}, "'system group' is not a string"),
    ("ib", {"port": "mlx5_0/1"}, "'ib' is not a list of at most 64 ports"),
    ("ib", [{"port": "p"}] * 65, "'ib' is not a list of at most 64 ports"),
    ("ib", ["mlx5_0/1"], "an IB port that is not an object"),
    ("ib", [{"state": "ACTIVE"}], "IB port name is not a string"),
    ("ib", [{"port": "mlx5_0/1", "state": 4}], "IB port state is not a string"),
    ("health", [], "'health' is not an object"),
    ("health", {"checked": "xid", "findings": []}, "health 'checked' is not a list"),
    ("health", {"checked": [], "findings": None}, "health 'findings' is not a list"),
    ("health", {"checked": [], "findings": [{"check": "xid", "gpu": 0, "status": "ok", "reason": ""}]},
     "finding status 'ok' is not one of warn, fail, unknown"),
    ("health", {"checked": [], "findings": [{"check": "xid", "gpu": 0, "status": "pass", "reason": ""}]},
     "finding status 'pass' is not one of"),
    ("health", {"checked": [], "findings": [{"check": "xid", "gpu": 256, "status": "fail", "reason": ""}]},
     "finding GPU 256 is not an index"),
    ("health", {"checked": [], "findings": [{"check": "xid", "gpu": 0, "status": "fail", "reason": "x" * 257}]},
     "a finding's reason is not a string of at most 256"),
    ("health", {"checked": [], "findings": [{"check": "xid", "gpu": 0, "status": "fail"}]},
     "a finding's reason is not a string"),
    ("health", {"checked": [], "findings": [{"status": "fail", "reason": ""}] * (schema.MAX_FINDINGS + 1)},
     "health 'findings' is not a list of at most 1024"),
])
def test_a_malformed_system_ib_or_health_rejects_the_entry(field, value, reason):
    rejects(checked_sample(**{field: value}), reason)


def test_a_check_this_version_does_not_know_is_dropped_not_rejected():
    entry = checked_sample()
    entry["health"]["checked"].append("quantum_flux")
    entry["health"]["findings"].append({"check": "quantum_flux", "gpu": 0, "status": "fail", "reason": "?"})
    got, nulled = goes_to_validate(schema.encode(entry))
    assert nulled == 0 and got["health"] == checked_sample()["health"]


def test_an_ib_counter_out_of_range_becomes_null_and_is_counted():
    entry = checked_sample()
    entry["ib"][0]["symbol_error"] = -1
    entry["ib"][0]["rate"] = 1e6
    got, nulled = goes_to_validate(schema.encode(entry))
    assert nulled == 2 and got["ib"][0]["symbol_error"] is None and got["ib"][0]["rate"] is None


@pytest.mark.parametrize("where", ["system", "ib port", "health", "finding"])
def test_a_field_the_contract_does_not_name_is_dropped_in_the_health_parts(where):
    entry = checked_sample()
    target = {"system": entry["system"], "ib port": entry["ib"][0], "health": entry["health"],
              "finding": entry["health"]["findings"][0]}[where]
    target["future"] = "x"
    assert takes_the_fast_path(schema.encode(entry)) == checked_sample()
