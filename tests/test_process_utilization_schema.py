"""A process's SM and memory utilization in the sample contract (gpulse.schema.PROCESS_METRICS): 0..100 or
null; a value out of range or NaN is nulled and counted, the sample kept; both gates agree."""

import orjson
import pytest

from gpulse import schema
from tests.samples import sample
from tests.test_schema_fast_path import read_both


def with_process(**utilization) -> bytes:
    entry = sample("gpu-01", gpus=1)
    entry["gpus"][0]["processes"] = [{"pid": 4242, "name": "python", "user": "alice", "mem_used": 1073741824,
                                      **dict.fromkeys(schema.PROCESS_IDENTITY), **utilization}]
    return orjson.dumps(entry)


def test_each_process_metric_is_a_percentage_with_its_nvidia_smi_name():
    assert [(m.name, m.unit, m.low, m.high) for m in schema.PROCESS_METRICS] == [
        ("sm_util", "%", 0, 100), ("mem_util", "%", 0, 100)]
    assert all("nvidia-smi pmon" in m.description for m in schema.PROCESS_METRICS)


@pytest.mark.parametrize("utilization", [{"sm_util": 62, "mem_util": 31}, {"sm_util": None, "mem_util": None},
                                         {"sm_util": 0, "mem_util": 100}, {"sm_util": 12.5}, {}])
def test_valid_readings_pass_the_fast_gate_unchanged(utilization):
    checked, fast = read_both(with_process(**utilization))

    assert fast is not None and checked[1] == 0
    (process,) = fast["gpus"][0]["processes"]
    assert {key: process.get(key) for key in utilization} == utilization


@pytest.mark.parametrize("raw", [b"101", b"-1", b"1e9", b"NaN"])
def test_a_reading_out_of_range_is_nulled_and_counted_and_the_sample_kept(raw):
    text = with_process(sm_util=7, mem_util=3).replace(b'"sm_util":7', b'"sm_util":' + raw)
    checked, fast = read_both(text)

    assert fast is None
    got, nulled = checked
    (process,) = got["gpus"][0]["processes"]
    assert nulled == 1 and process["sm_util"] is None and process["mem_util"] == 3
    assert got["gpus"][0]["util"] is not None  # nothing else lost


@pytest.mark.parametrize("value", ["62", True, [62]])
def test_a_reading_that_is_not_a_number_is_refused_with_its_reason(value):
    with pytest.raises(schema.MalformedSample, match="process 4242: 'mem_util' is not a number or null"):
        schema.read_checked(with_process(sm_util=1, mem_util=value))
