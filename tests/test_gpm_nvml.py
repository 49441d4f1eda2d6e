"""GPM activity from the nvml source, against the fake libnvidia-ml.so.1 through the real binding.

The fake's GPM (tests/fake_nvml/fake_nvml.c) integrates each metric's configured
percentage over time at every nvmlGpmSampleGet and computes nvmlGpmMetricsGet
from two samples, as NVML does; it refuses samples passed twice or swapped.
By default GPU i reads graphics engine 80+i %, SM 70+i, occupancy 40+i, any
tensor 50+i, HMMA 45+i, IMMA 4+i, DMMA 1+i, DRAM 60+i, FP64 2+i, FP32 20+i, FP16 8+i.
"""

import json
import logging
import time

from collectors.nvml import GPM_METRICS, GPM_MIN_WINDOW
from gpulse import schema
from tests import fake_nvml, test_collector_nvml
from tests.test_collector_nvml import PRINT_SAMPLE, collector_cli, only_sample, run_python

# The nvml source's fixtures: the fake loaded in this process, and a source opened on it.
fake_library = test_collector_nvml.fake_library
open_source = test_collector_nvml.open_source


def activity(gpu: dict) -> dict:
    return {name: gpu[name] for name in schema.ACTIVITY_METRIC_NAMES}


def default_activity(index: int) -> dict:
    percent = dict(zip(schema.ACTIVITY_METRIC_NAMES, (80, 70, 40, 50, 45, 4, 1, 60, 2, 20, 8), strict=True))
    return {name: (value + index) / 100 for name, value in percent.items()}


def test_every_activity_reading_of_the_contract_has_its_gpm_metric():
    assert tuple(GPM_METRICS) == schema.ACTIVITY_METRIC_NAMES


def test_the_first_sample_reports_each_gpus_activity_as_ratios(open_source, fake_library):
    source = open_source(gpus=3, gpm=["1:97.5:12:6:0:0:0:0:3:0:0.25:0"])
    sample = only_sample(source)

    # from a short extra sample, at least GPM's 100 ms before the first reading's
    assert all(fake_nvml.gpm_window(fake_library, i) >= GPM_MIN_WINDOW for i in range(3))
    gpu0, gpu1, gpu2 = sample["gpus"]
    assert activity(gpu0) == default_activity(0)
    # the stalled data loader: the GPU is "100 % utilized" while its SMs are nearly all idle
    assert activity(gpu1) == {
        "gr_active": 0.975, "sm_active": 0.12, "sm_occupancy": 0.06, "tensor_active": 0.0,
        "tensor_hmma_active": 0.0, "tensor_imma_active": 0.0, "tensor_dmma_active": 0.0, "dram_active": 0.03,
        "fp64_active": 0.0, "fp32_active": 0.0025, "fp16_active": 0.0,
    }
    assert activity(gpu2) == default_activity(2)
    assert schema.parse(schema.encode(sample)) == sample


def test_each_reading_covers_the_time_since_the_previous_sample(open_source, fake_library):
    source = open_source(gpus=1)
    assert only_sample(source)["gpus"][0]["sm_active"] == 0.7

    fake_nvml.configure(fake_library, fake_nvml.config(gpus=1, gpm=["0:90:15"]))
    time.sleep(0.3)
    gpu = only_sample(source)["gpus"][0]

    assert (gpu["gr_active"], gpu["sm_active"], gpu["sm_occupancy"]) == (0.9, 0.15, 0.4)
    # The previous read's sample, kept: not two fresh samples within this read.
    assert 0.3 <= fake_nvml.gpm_window(fake_library, 0) < 1.0


def test_samples_less_than_100_ms_apart_keep_the_window_and_the_last_readings(open_source, fake_library):
    source = open_source(gpus=1)
    only_sample(source)
    fake_nvml.configure(fake_library, fake_nvml.config(gpus=1, gpm=["0:90:15"]))

    assert only_sample(source)["gpus"][0]["sm_active"] == 0.7  # too soon for a new window
    time.sleep(GPM_MIN_WINDOW)
    assert only_sample(source)["gpus"][0]["sm_active"] == 0.15


def test_a_gpu_without_gpm_reports_null_activity_never_zero(open_source):
    sample = only_sample(open_source(gpus=2, unsupported=["gpm"], name="NVIDIA A100-SXM4-80GB"))

    for gpu in sample["gpus"]:
        assert activity(gpu) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
        assert gpu["util"] == 90 + gpu["index"] and "error" not in gpu
    assert schema.parse(schema.encode(sample)) == sample


def test_a_metric_the_gpu_does_not_give_is_null_and_the_others_are_read(open_source):
    gpu = only_sample(open_source(gpus=1, gpm=["0:80:70:40:50:45:na:1"]))["gpus"][0]

    assert gpu["tensor_imma_active"] is None
    assert {**activity(gpu), "tensor_imma_active": 0.04} == default_activity(0)


def test_a_gpm_error_on_one_gpu_nulls_its_activity_only(open_source, caplog, monkeypatch):
    monkeypatch.setattr("collectors.nvml._warned", set())
    source = open_source(gpus=3, gpm_error=["1:999"])  # NVML_ERROR_UNKNOWN from GPU 1's nvmlGpmSampleGet
    with caplog.at_level(logging.WARNING, logger="collectors.nvml"):
        first = only_sample(source)
        time.sleep(GPM_MIN_WINDOW)
        second = only_sample(source)

    for sample in (first, second):
        gpu0, gpu1, gpu2 = sample["gpus"]
        assert activity(gpu1) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
        assert gpu1["util"] == 91 and gpu1["lost"] is False and "error" not in gpu1
        assert activity(gpu0) == default_activity(0) and activity(gpu2) == default_activity(2)
    warnings = [r.getMessage() for r in caplog.records if "nvmlGpmSampleGet" in r.getMessage()]
    assert warnings == ["NVML: nvmlGpmSampleGet failed (Unknown Error); reporting null"]


def test_a_lost_gpu_reports_null_activity_and_the_others_keep_theirs(open_source, fake_library):
    source = open_source(gpus=2)
    only_sample(source)

    fake_nvml.configure(fake_library, fake_nvml.config(gpus=2, lost=[0]))
    time.sleep(GPM_MIN_WINDOW)
    lost, other = only_sample(source)["gpus"]

    assert lost["lost"] is True and activity(lost) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
    assert activity(other) == default_activity(1)


def test_the_collector_cli_once_reports_activity():
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=8))
    result = run_python(collector_cli(), env)

    assert result.returncode == 0, result.stderr
    sample = schema.parse(result.stdout.splitlines()[0])
    assert [activity(gpu) for gpu in sample["gpus"]] == [default_activity(i) for i in range(8)]


def test_a_driver_before_gpm_reports_null_activity_and_everything_else():
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=1), variant="r470")  # no nvmlGpm* entry points
    result = run_python(["-c", PRINT_SAMPLE], env)

    assert result.returncode == 0, result.stderr
    gpu = json.loads(result.stdout)["gpus"][0]
    assert activity(gpu) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
    assert gpu["util"] == 90 and gpu["power"] == 612.4


def test_at_short_intervals_the_first_sample_does_not_wait_for_gpm_and_the_next_has_it(open_source):
    source = open_source(gpus=2, read_timeout=0.06)  # as at --interval 0.12: the read timeout is half of it
    first = only_sample(source)

    for gpu in first["gpus"]:
        assert "error" not in gpu and gpu["power"] is not None  # not timed out waiting for GPM's window
        assert activity(gpu) == dict.fromkeys(schema.ACTIVITY_METRIC_NAMES)
    time.sleep(0.2)
    assert [activity(gpu) for gpu in only_sample(source)["gpus"]] == [default_activity(0), default_activity(1)]
