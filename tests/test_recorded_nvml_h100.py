"""A real H100's telemetry, as the real collector published it, through the contract, the checks and ingest.

tests/data/nvml-h100/ holds what `python -m collectors --source nvml
--probe-interval 8` wrote to Redis on a lent machine with one NVIDIA H100 80GB
HBM3 (driver 580.159.04, 2026-11-26): 36 one-second samples, idle, then 10 s
of a bf16 matrix-product load (at its 700 W cap, clocks down for sw_power_cap,
the probe's NCCL rank beside the load's process), then idle again; and the
two NCCL probe results. The fake libnvidia-ml answers what its author wrote;
these are what the driver answered (docs/PERFORMANCE.md, "On a real H100").
"""

from pathlib import Path

import orjson
import pytest

from collectors.health_checks import HealthChecks
from dashboard.live.frames import FIELDS, FLAG_THROTTLED
from dashboard.probes.tracker import ProbeTracker
from gpulse import schema
from gpulse.keys import Keys
from tests.test_ingest import frames, make_ingest, xadd  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

DATA = Path(__file__).with_name("data") / "nvml-h100"
ENTRIES = (DATA / "telemetry.jsonl").read_bytes().splitlines()
MIB = 1 << 20


def test_every_real_sample_passes_the_fast_gate_and_the_contract_nulls_nothing():
    for raw in ENTRIES:
        assert schema.read_fast(raw) is not None
        assert schema.validate(orjson.loads(raw)) == 0  # no reading outside its documented range


def test_the_health_checks_find_nothing_wrong_with_a_healthy_h100_idle_busy_or_power_capped():
    """Run again on the recorded readings: a false warning here would page every real H100 owner."""
    checks = HealthChecks()
    for raw in ENTRIES:
        sample = orjson.loads(raw)
        del sample["health"]
        checks.annotate(sample, sample["ts"])
        findings = {(f["check"], f["status"]) for f in sample["health"]["findings"]}
        # This machine's H100 has no NVLink links NVML answers for: unknown, never a pass or a failure.
        assert findings == {("nvlink_state", "unknown"), ("nvlink_errors", "unknown")}


def test_ingest_shows_the_busy_power_capped_gpu(redis_client, make_ingest, frames):  # noqa: F811
    busy = ENTRIES[:17]  # ends 3 s into the load, the probe's rank beside it
    last = orjson.loads(busy[-1])
    ingest = make_ingest(clock=lambda: last["ts"] + 0.5)
    for raw in busy:
        xadd(redis_client, raw, at=orjson.loads(raw)["ts"])
    assert ingest.read(block_ms=10) == len(busy)
    ingest.emit(last["ts"] + 0.5)
    assert (ingest.rejected, ingest.nulled) == (0, 0)
    node = frames[-1]["nodes"]["h100-vm"]
    assert node["status"] == "up"
    row = dict(zip(FIELDS, node["gpus"][0], strict=True))
    gpu = last["gpus"][0]
    assert (row["util"], row["temp"], row["sm_clock"]) == (100, gpu["temp"], 1320)
    assert row["mem_used"] == round(gpu["mem_used"] / MIB)
    assert row["power"] == 701  # W, at the 700 W cap
    assert gpu["throttle"] == ["sw_power_cap"]
    assert not row["flags"] & FLAG_THROTTLED  # the power cap is where a busy H100 runs, not a slowdown to flag
    assert [p["name"] for p in gpu["processes"]] == ["python3", "python3"]


def test_the_real_nccl_probes_pass_the_contract_and_a_one_gpu_node_has_no_busbw_to_alert_on(redis_client):
    tracker = ProbeTracker(redis_client, Keys(), low_fraction=0.2)
    probes = [schema.read_probe(line) for line in (DATA / "probes.jsonl").read_bytes().splitlines()]
    assert [(p["backend"], p["world_size"], p["status"], p["busbw"]) for p in probes] == [
        ("nccl", 1, "succeeded", 0.0)] * 2
    for probe in probes:
        tracker.record(probe)
    # One rank: nothing crosses a link, so busbw is 0 by nccl-tests' formula: not low, and no value for a
    # probe.busbw rule (a "< 100 GB/s" rule would otherwise fire on every one-GPU node).
    assert (tracker.latest["h100-vm"]["low"], tracker.latest["h100-vm"]["busbw"]) == (False, None)
    assert tracker.busbw() == {}
