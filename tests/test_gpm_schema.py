"""The activity readings (gpulse.schema.ACTIVITY_METRICS) in the sample contract: optional ratios 0-1."""

import orjson
import pytest

from gpulse import schema
from tests.samples import sample
from tests.test_schema_fast_path import read_both

FULL = {"gr_active": 0.981, "sm_active": 0.7123, "sm_occupancy": 0.4, "tensor_active": 0.5,
        "tensor_hmma_active": 0.45, "tensor_imma_active": 0, "tensor_dmma_active": 0.0, "dram_active": 1,
        "fp64_active": 0.02, "fp32_active": 0.2, "fp16_active": 0.08}


def test_each_activity_reading_is_a_ratio_with_its_dcgm_and_gpm_names():
    assert tuple(FULL) == schema.ACTIVITY_METRIC_NAMES
    for metric in schema.ACTIVITY_METRICS:
        assert (metric.unit, metric.low, metric.high) == ("ratio", 0, 1)
        assert "DCGM_FI_PROF_" in metric.description and "GPM" in metric.description
        assert metric in schema.OPTIONAL_GPU_METRICS  # optional: older collectors do not send them


@pytest.mark.parametrize("readings", [FULL, dict.fromkeys(FULL), {}], ids=["values", "nulls", "absent"])
def test_samples_with_without_or_with_null_activity_pass_both_gates_unchanged(readings):
    entry = sample("gpu-01", **readings)
    checked, fast = read_both(orjson.dumps(entry))

    assert checked == (entry, 0)
    assert fast == entry  # the fast gate lets them through: no slower path for the new readings


# As JSON writes them; NaN and Infinity as Python's json writes them (ingest reads those too).
@pytest.mark.parametrize("value", ["1.0001", "-0.01", "97.5", "2", "NaN", "Infinity"])
def test_an_activity_reading_outside_0_to_1_becomes_null_and_is_counted(value):
    raw = orjson.dumps(sample("gpu-01", gpus=1, sm_active=0.5)).replace(b'"sm_active":0.5',
                                                                        f'"sm_active":{value}'.encode())
    (checked, nulled), fast = read_both(raw)

    assert fast is None
    assert checked["gpus"][0]["sm_active"] is None and nulled == 1


@pytest.mark.parametrize("value", ['"0.5"', "true", "[0.5]"])
def test_an_activity_reading_that_is_not_a_number_rejects_the_entry(value):
    raw = orjson.dumps(sample("gpu-01", gpus=1, dram_active=0.5)).replace(b'"dram_active":0.5',
                                                                          f'"dram_active":{value}'.encode())
    with pytest.raises(schema.MalformedSample, match="'dram_active' is not a number or null"):
        schema.read(raw)
