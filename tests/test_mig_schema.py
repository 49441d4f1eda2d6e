"""The "mig" list in the sample contract (gpulse.schema): bounded, checked, and a malformed one dropped
with its reason while the rest of the sample stands. Both gates (read_fast, validate) agree on each case."""

import logging

import orjson
import pytest

from gpulse import schema
from gpulse.ratelog import RateLimitedLog
from tests.samples import sample
from tests.test_schema_fast_path import read_both

PROCESS = {"pid": 4242, "name": "python", "user": "alice", "mem_used": 1073741824,
           **dict.fromkeys(schema.PROCESS_IDENTITY)}


def instance(gpu_instance: int = 1, compute_instance: int | None = 0, **overrides) -> dict:
    return {"gpu_instance": gpu_instance, "compute_instance": compute_instance, "profile": "3g.40gb",
            "uuid": "MIG-c788539f-c1ea-5a36-8b4d-9b07d024b1bb", "mem_used": 2147483648, "mem_total": 42949672960,
            "processes": [PROCESS], **dict.fromkeys(schema.ACTIVITY_METRIC_NAMES, 0.5),
            "k8s": {"pod": "bert-0", "namespace": "ml", "container": "trainer"}, **overrides}


def mig_sample(instances) -> dict:
    """GPU 0 with ``instances``; GPU 1 not in MIG mode."""
    entry = sample("gpu-01", gpus=2)
    entry["gpus"][0].update(util=None, mig_enabled=True, mig=instances)
    return entry


@pytest.fixture(autouse=True)
def fresh_log_limit(monkeypatch):
    """Each case's message is logged: the limit counts across the whole session otherwise."""
    monkeypatch.setattr(schema, "_mig_dropped", RateLimitedLog(logging.getLogger("gpulse.schema")))


def test_each_instance_metric_has_its_unit_and_its_nvidia_smi_or_dcgm_name():
    assert schema.MIG_METRIC_NAMES[:2] == ("mem_used", "mem_total")
    assert set(schema.ACTIVITY_METRIC_NAMES) <= set(schema.MIG_METRIC_NAMES)
    for metric in schema.MIG_METRICS[:2]:
        assert metric.unit == "bytes" and "nvidia-smi" in metric.description and "DCGM" in metric.description


@pytest.mark.parametrize("instances", [
    [], [instance()], [instance(1, 0), instance(1, 1), instance(13, None, processes=None, k8s=None)],
    [instance(gpu_instance=i, profile=p) for i, p in enumerate(
        ["1g.10gb", "1g.10gb+me", "1c.3g.40gb", "7g.80gb", "1g.12gb", "2g.24gb", "1g.10gb", "4g.40gb"])],
], ids=["none", "one", "shared-and-nulls", "eight"])
def test_valid_instance_lists_pass_the_fast_gate_unchanged(instances):
    entry = mig_sample(instances)
    checked, fast = read_both(orjson.dumps(entry))
    assert checked == (entry, 0) and fast == entry


def test_an_instance_reading_out_of_range_becomes_null_and_is_counted():
    entry = mig_sample([instance(sm_active=1.5, mem_used=-1)])
    (checked, nulled), fast = read_both(orjson.dumps(entry))

    assert fast is None and nulled == 2
    (got,) = checked["gpus"][0]["mig"]
    assert got["sm_active"] is None and got["mem_used"] is None and got["dram_active"] == 0.5


def test_fields_the_contract_does_not_name_are_dropped_from_an_instance():
    raw = orjson.dumps(mig_sample([instance(secret="x", k8s={"pod": "p", "token": "t"})]))
    (checked, _), _ = read_both(raw)
    (got,) = checked["gpus"][0]["mig"]
    assert "secret" not in got and got["k8s"] == {"pod": "p"}


@pytest.mark.parametrize(("instances", "reason"), [
    ({"gpu_instance": 1}, "not a list of at most 8 MIG instances"),
    ([instance(gpu_instance=i) for i in range(9)], "not a list of at most 8 MIG instances"),
    (["1g.10gb"], "an instance that is not an object: '1g.10gb'"),
    ([instance(gpu_instance=None)], "gpu_instance None is not an integer 0..31"),
    ([instance(gpu_instance=True)], "gpu_instance True is not an integer 0..31"),
    ([instance(gpu_instance=32)], "gpu_instance 32 is not an integer 0..31"),
    ([instance(compute_instance="0")], "compute_instance '0' is not an integer 0..31"),
    ([instance(1, 0), instance(1, 0)], "instance 1/0 is listed twice"),
    ([instance(profile="<script>")], "instance 1/0: profile '<script>' is not a MIG profile name like 1g.10gb"),
    ([instance(profile="1g." + "9" * 40)], "is not a MIG profile name"),
    ([instance(uuid="M" * 200)], "instance 1/0: 'uuid' is not a string of at most 128 characters or null"),
    ([instance(mem_used="2GiB")], "instance 1/0: 'mem_used' is not a number or null"),
    ([instance(processes={"pid": 1})], "instance 1/0: 'processes' is not a list"),
    ([instance(processes=[{"pid": -1}])], "instance 1/0: a process whose pid is not an integer"),
    ([instance(k8s="pod")], "instance 1/0: 'k8s' is not an object"),
])
def test_a_malformed_instance_list_is_dropped_with_its_reason_and_the_sample_kept(instances, reason, caplog):
    entry = mig_sample(instances)
    with caplog.at_level(logging.WARNING, logger="gpulse.schema"):
        (checked, nulled), fast = read_both(orjson.dumps(entry))

    assert fast is None and nulled == 1
    # nothing else of the sample is lost: the GPU's own readings, the other GPU, the host
    assert checked == {**entry, "gpus": [{**entry["gpus"][0], "mig": None}, entry["gpus"][1]]}
    (message,) = {record.getMessage() for record in caplog.records}  # once per read: the same words
    assert message.startswith("node gpu-01 GPU 0: 'mig' dropped: ") and reason in message


def test_only_the_gpu_with_the_malformed_list_loses_it():
    entry = mig_sample([instance()])
    entry["gpus"][1]["mig"] = [instance(profile="../../etc")]
    (checked, nulled), _ = read_both(orjson.dumps(entry))

    assert nulled == 1
    assert checked["gpus"][0]["mig"] == [instance()] and checked["gpus"][1]["mig"] is None
