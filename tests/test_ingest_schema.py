"""The sample contract (gpulse.schema.validate): what it rejects, what it nulls, what it lets through.

Each entry is read both through read()'s fast gate and through validate() alone (read_both), which must agree.
"""

import math
import time

import pytest

from gpulse import schema
from tests.samples import gpu, sample
from tests.test_schema_fast_path import read_both


def read(raw: bytes) -> tuple[dict, int]:
    checked, _ = read_both(raw)
    assert checked is not None, "rejected"
    return checked


def rejects(entry, reason: str) -> None:
    raw = entry if isinstance(entry, bytes) else schema.encode(entry)
    if len(raw) <= schema.MAX_ENTRY_BYTES:
        assert read_both(raw) == (None, None)
    with pytest.raises(schema.MalformedSample, match=reason):
        schema.read(raw)


def test_a_process_with_its_scheduler_identity_passes_unchanged():
    good = sample("gpu-01", gpus=1, processes=[{
        "pid": 42, "name": "python", "user": "alice", "mem_used": 2**30, "cmd": "python train.py --lr 3e-4",
        "job": "1234", "step": "0", "pod_uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "container": "9" * 64}])
    parsed, nulled = read(schema.encode(good))
    assert parsed == good and nulled == 0


def test_a_collector_sample_passes_unchanged():
    good = sample("gpu-01.cluster_a", gpus=8, processes=[{"pid": 42, "name": "python", "user": None,
                                                          "mem_used": 2**30}], throttle=["sw_power_cap"], xid=[79])
    parsed, nulled = read(schema.encode(good))
    assert parsed == good and nulled == 0


@pytest.mark.parametrize("field, value, reason", [
    ("throttle", 1, "'throttle' is not a list"),
    ("throttle", ["warp_drive"], "unknown throttle reason 'warp_drive'"),
    ("name", 5, "'name' is not a string"),
    ("name", "x" * 200, "'name' is not a string of at most 128"),
    ("uuid", ["GPU-0"], "'uuid' is not a string"),
    ("xid", ["79"], "Xid '79' is not an integer"),
    ("xid", [-1], "Xid -1 is not an integer"),
    ("xid", 79, "'xid' is not a list"),
    ("processes", [{"pid": "1", "name": "x"}], "pid is not an integer"),
    ("processes", [{"pid": 1, "name": 2}], "'process name' is not a string"),
    ("processes", [{"pid": 1, "user": {}}], "'process user' is not a string"),
    ("processes", [1], "a process that is not an object"),
    ("processes", [{"pid": 1, "job": 1234}], "'process job' is not a string"),
    ("processes", [{"pid": 1, "cmd": "x" * 129}], "'process cmd' is not a string of at most 128"),
    ("processes", [{"pid": 1, "container": ["abc"]}], "'process container' is not a string"),
    ("lost", "yes", "'lost' is not true"),
    ("util", "97", "'util' is not a number"),
    ("temp", True, "'temp' is not a number"),
    ("index", -1, "GPU index -1 is not"),
    ("index", 256, "GPU index 256 is not"),
    ("index", 40000, "GPU index 40000 is not"),
    ("index", None, "GPU index None is not"),
    ("energy", "48213775401", "'energy' is not a number"),
    ("k8s", "llama-ft", "'k8s' is not an object"),
    ("k8s", {"pod": 7}, "k8s 'pod' is not a string"),
    ("k8s", {"namespace": "n" * 254}, "k8s 'namespace' is not a string of at most 253"),
])
def test_a_gpu_field_of_the_wrong_type_or_bound_rejects_the_entry(field, value, reason):
    entry = sample("n1", gpus=2)
    entry["gpus"][0][field] = value
    rejects(entry, reason)


@pytest.mark.parametrize("field, value, reason", [
    ("node", "a/b", "node name 'a/b' is not"),
    ("node", "n" * 64, "is not 1-63 letters"),
    ("node", "", "node name '' is not"),
    ("node", "-x", "node name '-x' is not"),
    ("node", 5, "node name 5 is not"),
    # scontrol update NodeName=ALL updates every node (issue 31); Slurm compares it in any case.
    ("node", "ALL", "node name 'ALL' is a Slurm keyword"),
    ("node", "all", "node name 'all' is a Slurm keyword"),
    ("node", "aLL", "node name 'aLL' is a Slurm keyword"),
    ("node", "DEFAULT", "node name 'DEFAULT' is a Slurm keyword"),
    ("v", True, "unknown sample version True"),
    ("ts", -1e11, "ts -100000000000.0 is not a unix time"),
    ("ts", 1e308, "ts 1e[+]308 is not a unix time"),
    ("ts", "now", "non-numeric field 'ts'"),
    ("interval", 6e307, "interval 6e[+]307 is not within 0.05..3600"),
    ("interval", 0, "interval 0 is not within"),
    ("host", [], "'host' is not an object"),
    ("gpus", {}, "missing field 'gpus'"),
])
def test_a_sample_field_of_the_wrong_type_or_range_rejects_the_entry(field, value, reason):
    rejects({**sample("n1"), field: value}, reason)


@pytest.mark.parametrize("field", ["node", "ts", "interval", "gpus"])
def test_a_missing_field_rejects_the_entry(field):
    entry = sample("n1")
    del entry[field]
    rejects(entry, f"missing.*{field}")


def test_a_ts_far_from_the_readers_clock_is_read_not_rejected():
    entry = sample("n1", ts=time.time() + 3600)  # a node whose clock is an hour ahead: flagged by ingest, kept
    assert read(schema.encode(entry))[0] == entry


def test_seq_and_boot_are_optional_but_checked_together():
    stamped = {**sample("n1"), "seq": 7, "boot": "3f2a9c01d4e5b6a7"}
    assert read(schema.encode(stamped))[0] == stamped
    rejects({**sample("n1"), "seq": -1, "boot": "b"}, "seq -1 is not an integer")
    rejects({**sample("n1"), "seq": 1.5, "boot": "b"}, "seq 1.5")
    rejects({**sample("n1"), "seq": 1}, "boot None")
    rejects({**sample("n1"), "seq": 1, "boot": "a b"}, "boot 'a b'")


def test_two_gpus_with_one_index_reject_the_entry():
    entry = sample("n1")
    entry["gpus"][1]["index"] = 0
    rejects(entry, "GPU index 0 is not a unique")


def test_more_than_256_gpus_or_a_mebibyte_reject_the_entry():
    rejects({**sample("n1"), "gpus": [gpu(i % 256) for i in range(257)]}, "257 GPUs, more than 256")
    huge = {**sample("n1"), "pad": "x" * schema.MAX_ENTRY_BYTES}
    rejects(huge, "more than 1048576")


def test_not_json_rejects_the_entry():
    rejects(b"{not json", "not JSON")
    rejects(b"", "not JSON")
    rejects(b"[1, 2]", "not a JSON object")


@pytest.mark.parametrize("field, value", [
    ("util", 1.85e19), ("util", 100.5), ("temp", -41), ("temp", 1000), ("power", 6000.0), ("power", -1),
    ("sm_clock", 1.85e19), ("mem_clock", 20_001), ("mem_used", 2e15), ("pcie_tx", -5), ("fan", 101),
    ("ecc_uncorrected", -1), ("util", math.nan),
    ("mem_temp", 9.223372036854776e18), ("energy", 2**63 - 14), ("energy", -1), ("pcie_replay", 2**54),
])
def test_one_reading_out_of_range_becomes_null_and_is_counted(field, value):
    entry = sample("n1", gpus=2)
    entry["gpus"][1][field] = value
    read_both(schema.encode(entry))
    assert schema.validate(entry) == 1
    assert entry["gpus"][1][field] is None and entry["gpus"][0].get(field) == gpu(0).get(field)


def test_nan_infinity_and_1e400_in_the_json_become_null_and_are_counted():
    raw = schema.encode(sample("n1", gpus=1)).replace(b'"util":50', b'"util":NaN').replace(
        b'"temp":60', b'"temp":Infinity').replace(b'"power":400.0', b'"power":1e400')
    parsed, nulled = read(raw)
    assert nulled == 3
    assert (parsed["gpus"][0]["util"], parsed["gpus"][0]["temp"], parsed["gpus"][0]["power"]) == (None, None, None)
    rejects(raw.replace(b'"interval":1.0', b'"interval":NaN'), "interval nan is not within")


def test_host_and_process_readings_out_of_range_are_nulled_and_counted():
    entry = sample("n1", gpus=1, processes=[{"pid": 1, "name": "x", "user": "u", "mem_used": -5}])
    entry["host"]["cpu_util"] = 400
    parsed, nulled = read(schema.encode(entry))
    assert nulled == 2 and parsed["host"]["cpu_util"] is None and parsed["gpus"][0]["processes"][0]["mem_used"] is None


def test_the_optional_readings_and_workload_pass_and_may_be_left_out():
    full = sample("n1", gpus=2)
    full["gpus"][0].update(mem_temp=71, energy=48213775401, pcie_replay=3,
                           k8s={"pod": "llama-ft-7f9c4-x2k8z", "namespace": "ml-team", "container": None})
    parsed, nulled = read(schema.encode(full))
    assert parsed == full and nulled == 0
    assert not set(schema.OPTIONAL_GPU_METRIC_NAMES) & set(schema.GPU_METRIC_NAMES)


def test_every_reading_documents_its_range():
    assert all(metric.low < metric.high
               for metric in schema.GPU_METRICS + schema.OPTIONAL_GPU_METRICS + schema.HOST_METRICS)
    temp = next(metric for metric in schema.GPU_METRICS if metric.name == "temp")
    assert (temp.low, temp.high) == (-40, 150)
