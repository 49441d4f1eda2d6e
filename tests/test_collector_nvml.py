"""The nvml source against a fake libnvidia-ml.so.1 driven by the real nvidia-ml-py binding.

The fake's readings are fixed (tests/fake_nvml/fake_nvml.c): GPU i reports
utilization 90+i %, 612400+1000*i mW, PCIe 1171875 KB/s TX, and so on.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.nvml import TIMED_OUT, NvmlSource
from collectors.sources import SourceUnavailable
from gpulse import schema
from tests import fake_nvml

REPO = Path(__file__).resolve().parent.parent
MISSING_PID = 999_999_999  # above any pid_max, so never a live process
HEALTH_CALLS = ["pcie_gen", "pcie_width", "pcie_gen_max", "pcie_width_max", "remap", "retired", "retired_pending",
                "ecc_mode", "persistence", "compute_mode", "mig", "vbios", "nvlink_state", "nvlink_errors"]
ALL_READINGS = ["util", "memory", "temp", "power", "power_limit", "clocks", "fan", "throttle", "ecc", "pcie",
                "nvlink", "events", "procs", "energy", "pcie_replay", "mem_temp", "gpm", *HEALTH_CALLS]
STATIC_READINGS = ("pcie_gen_max", "pcie_width_max", "vbios", "nvlink_links")  # read once per GPU
RECORDED_SYSFS = REPO / "tests" / "data" / "sysfs"
ENERGY_AT_INIT = 48213775401  # mJ, the fake's GPU 0 at nvmlInit


@pytest.fixture(scope="module")
def fake_library():
    library = fake_nvml.preload()
    import pynvml

    if pynvml.nvmlLib is not None and not hasattr(pynvml.nvmlLib, "fakeNvmlConfigure"):
        pytest.skip("this process already loaded a real NVML library")
    return library


@pytest.fixture
def open_source(fake_library, monkeypatch):
    """Return a function that configures the fake and opens an NvmlSource on it."""
    sources = []

    def open_(read_timeout=None, pod_resources=None, energy_interval=None, **settings):
        monkeypatch.setenv("FAKE_NVML_CONFIG", fake_nvml.config(**settings))
        source = NvmlSource("gpu-01", 1.0, read_timeout=read_timeout, pod_resources=pod_resources,
                            energy_interval=energy_interval)
        sources.append(source)
        return source

    yield open_
    for source in sources:
        source.close()


def only_sample(source) -> dict:
    samples = source.sample()
    assert len(samples) == 1
    return samples[0]


def assert_all_readings_null(gpu):
    readings = (schema.GPU_METRIC_NAMES + schema.OPTIONAL_GPU_METRIC_NAMES + schema.OPTIONAL_GPU_FLAGS
                + schema.OPTIONAL_GPU_TEXTS)
    assert {name: gpu[name] for name in readings} == dict.fromkeys(readings)
    assert gpu["throttle"] is None
    assert gpu["processes"] is None


def assert_full(gpu, index):
    assert gpu["lost"] is False
    assert "error" not in gpu
    assert gpu["uuid"] == f"GPU-fa4e0000-0000-4000-8000-{index:012d}"
    assert gpu["util"] == 90 + index
    assert gpu["power"] == (612400 + 1000 * index) / 1000


def test_it_reports_every_reading_in_schema_units(open_source):
    opened = time.monotonic()
    source = open_source(gpus=2, throttle="0x4")
    sample = only_sample(source)
    since_open = time.monotonic() - opened

    assert sample["v"] == 1 and sample["node"] == "gpu-01" and sample["interval"] == 1.0
    assert abs(sample["ts"] - time.time()) < 5
    gpu0, gpu1 = sample["gpus"]
    assert gpu0 == {
        "index": 0,
        "uuid": "GPU-fa4e0000-0000-4000-8000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "lost": False,
        "util": 90,
        "mem_util": 60,
        "mem_used": 61203283968,  # the v2 call: driver-reserved memory left out
        "mem_total": 85520809984,
        "temp": 60,
        "power": 612.4,  # 612400 mW
        "power_limit": 700.0,
        "sm_clock": 1980,
        "mem_clock": 2619,
        "fan": 40,
        "throttle": ["sw_power_cap"],
        "ecc_uncorrected": 0,
        "xid": [],
        "pcie_tx": 1.2e9,  # 1171875 KB/s
        "pcie_rx": 3.2e9,  # 3125000 KB/s
        "nvlink_tx": None,  # a rate needs two reads of the counters
        "nvlink_rx": None,
        "processes": [],
        "mem_temp": 70,  # °C, the NVML_FI_DEV_MEMORY_TEMP field
        "energy": gpu0["energy"],  # mJ since the driver loaded: a counter, checked below
        "pcie_replay": 0,
        # the health readings of a healthy H100 SXM (the fake's defaults)
        "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
        "remapped_correctable": 0, "remapped_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
        "retired_pages": None, "retired_pending": None,  # a GPU that remaps rows retires no pages
        "ecc_enabled": True, "ecc_pending": False, "persistence": True, "compute_mode": "Default",
        "mig_enabled": False, "mig_pending": False, "vbios": "96.00.99.00.01",
        "nvlink_links": 4, "nvlink_links_up": 4, "nvlink_errors": 0,
        # GPM activity, ratios 0-1 from two samples (tests/test_gpm_nvml.py has the rest)
        "gr_active": 0.8, "sm_active": 0.7, "sm_occupancy": 0.4, "tensor_active": 0.5, "tensor_hmma_active": 0.45,
        "tensor_imma_active": 0.04, "tensor_dmma_active": 0.01, "dram_active": 0.6, "fp64_active": 0.02,
        "fp32_active": 0.2, "fp16_active": 0.08,
    }
    # The fake's counter starts at 48213775401 + i mJ and grows at the GPU's power (mW x s = mJ).
    assert ENERGY_AT_INIT <= gpu0["energy"] <= ENERGY_AT_INIT + 612400 * since_open
    assert ENERGY_AT_INIT + 1 <= gpu1["energy"] <= ENERGY_AT_INIT + 1 + 613400 * since_open
    assert (gpu1["mem_temp"], gpu1["pcie_replay"]) == (71, 1)
    assert (gpu1["index"], gpu1["util"], gpu1["temp"], gpu1["power"], gpu1["fan"]) == (1, 91, 61, 613.4, 41)
    assert gpu1["mem_used"] == 61203283968 + 2**30
    assert gpu1["ecc_uncorrected"] == 1  # uncorrected volatile; other counters answer 1000+

    host = sample["host"]
    assert 0 <= host["cpu_util"] <= 100
    assert 0 < host["mem_used"] < host["mem_total"]
    assert sample["system"] == {"driver": "550.54.15", "cuda": "12.4"}
    assert "ib" not in sample  # no sysfs given
    assert schema.parse(schema.encode(sample)) == sample


def test_the_health_readings_are_what_the_driver_reports(open_source):
    source = open_source(
        gpus=2, pcie="3:5:8:16", remapped="2:1:1:0", ecc_mode="1:0", persistence=0, compute_mode=3, mig="1:0",
        vbios="96.00.74.00.0B", nvlinks=18, nvlink_down=[2, 5], nvlink_errors="1:2:3:4",
        driver="535.129.03", cuda=12020,
    )
    sample = only_sample(source)

    health = {name: sample["gpus"][1][name] for name in (
        "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "remapped_correctable", "remapped_uncorrectable",
        "remap_pending", "remap_failure", "retired_pages", "retired_pending", "ecc_enabled", "ecc_pending",
        "persistence", "compute_mode", "mig_enabled", "mig_pending", "vbios", "nvlink_links", "nvlink_links_up",
        "nvlink_errors")}
    assert health == {
        "pcie_gen": 3, "pcie_gen_max": 5, "pcie_width": 8, "pcie_width_max": 16,
        "remapped_correctable": 2, "remapped_uncorrectable": 1, "remap_pending": True, "remap_failure": False,
        "retired_pages": None, "retired_pending": None,
        "ecc_enabled": True, "ecc_pending": True,  # on now, off after the next reset
        "persistence": False, "compute_mode": "Exclusive_Process", "mig_enabled": True, "mig_pending": True,
        "vbios": "96.00.74.00.0B", "nvlink_links": 18, "nvlink_links_up": 16,
        "nvlink_errors": 16 * (1 + 2 + 3 + 4),  # CRC flit, CRC data, replay, recovery of the 16 links up
    }
    assert sample["system"] == {"driver": "535.129.03", "cuda": "12.2"}
    assert schema.parse(schema.encode(sample)) == sample


@pytest.mark.parametrize("mode, name", [(0, "Default"), (2, "Prohibited"), (3, "Exclusive_Process")])
def test_the_compute_mode_is_named_as_nvidia_smi_names_it(open_source, mode, name):
    assert only_sample(open_source(compute_mode=mode))["gpus"][0]["compute_mode"] == name


def test_a_gpu_without_row_remapping_reports_its_retired_pages(open_source):
    gpu = only_sample(open_source(unsupported=["remap"], retired="3:2:1"))["gpus"][0]

    assert (gpu["retired_pages"], gpu["retired_pending"]) == (5, True)  # 3 single-bit + 2 double-bit
    assert [gpu[name] for name in ("remapped_correctable", "remapped_uncorrectable", "remap_pending",
                                   "remap_failure")] == [None] * 4


def test_a_gpu_that_remaps_rows_is_not_asked_for_retired_pages(open_source):
    gpu = only_sample(open_source(retired="3:2:1"))["gpus"][0]

    assert (gpu["retired_pages"], gpu["retired_pending"]) == (None, None)


# Each call the fake can refuse -> the readings that become null, and only those.
UNSUPPORTED_CALLS = {
    "pcie_gen": ["pcie_gen"],
    "pcie_width": ["pcie_width"],
    "pcie_gen_max": ["pcie_gen_max"],
    "pcie_width_max": ["pcie_width_max"],
    "remap": ["remapped_correctable", "remapped_uncorrectable", "remap_pending", "remap_failure"],
    "ecc_mode": ["ecc_enabled", "ecc_pending"],
    "persistence": ["persistence"],
    "compute_mode": ["compute_mode"],
    "mig": ["mig_enabled", "mig_pending"],
    "vbios": ["vbios"],
    "nvlink_state": ["nvlink_links", "nvlink_links_up", "nvlink_errors"],
    "nvlink_errors": ["nvlink_errors"],
}
HEALTH_READINGS = sorted({name for names in UNSUPPORTED_CALLS.values() for name in names})


@pytest.mark.parametrize("call", UNSUPPORTED_CALLS)
def test_an_unsupported_health_call_gives_null_and_keeps_the_rest(open_source, call):
    sample = only_sample(open_source(unsupported=[call]))
    gpu = sample["gpus"][0]

    assert {name for name in HEALTH_READINGS if gpu[name] is None} == set(UNSUPPORTED_CALLS[call])
    assert gpu["lost"] is False and "error" not in gpu
    assert schema.parse(schema.encode(sample)) == sample


@pytest.mark.parametrize("call, expected", [("retired", (None, True)), ("retired_pending", (5, None))])
def test_an_unsupported_retired_pages_call_gives_null(open_source, call, expected):
    gpu = only_sample(open_source(unsupported=["remap", call], retired="3:2:1"))["gpus"][0]

    assert (gpu["retired_pages"], gpu["retired_pending"]) == expected


def test_a_gpu_without_nvlink_reports_null_links(open_source):
    gpu = only_sample(open_source(nvlinks=0))["gpus"][0]

    assert (gpu["nvlink_links"], gpu["nvlink_links_up"], gpu["nvlink_errors"]) == (None, None, None)


def test_a_driver_that_cannot_tell_its_cuda_version_reports_null(open_source):
    assert only_sample(open_source(unsupported=["cuda"]))["system"] == {"driver": "550.54.15", "cuda": None}


def test_the_slot_vbios_and_links_are_read_once_per_gpu(open_source, fake_library):
    source = open_source(vbios="96.00.74.00.0B", pcie="4:4:16:16", nvlinks=18)
    only_sample(source)

    # What only a new board or slot changes is not asked again; what the link does now is.
    fake_nvml.configure(fake_library, fake_nvml.config(vbios="96.00.99.00.01", pcie="3:5:8:8", nvlinks=4))
    gpu = only_sample(source)["gpus"][0]

    assert (gpu["vbios"], gpu["pcie_gen_max"], gpu["pcie_width_max"], gpu["nvlink_links"]) == (
        "96.00.74.00.0B", 4, 16, 18)
    assert (gpu["pcie_gen"], gpu["pcie_width"]) == (3, 8)


def test_a_lost_gpu_reports_null_health_readings(open_source):
    gpu = only_sample(open_source(gpus=2, lost=[1]))["gpus"][1]

    assert gpu["lost"] is True
    assert_all_readings_null(gpu)


def test_each_sample_carries_the_infiniband_ports_of_the_given_sysfs(fake_library, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_CONFIG", fake_nvml.config(gpus=1))
    source = NvmlSource("gpu-01", 1.0, sysfs=RECORDED_SYSFS)
    try:
        sample = only_sample(source)
    finally:
        source.close()

    assert [(port["port"], port["state"], port["rate"]) for port in sample["ib"]] == [
        ("mlx5_0/1", "ACTIVE", 400.0), ("mlx5_1/1", "DOWN", 10.0)]
    assert schema.parse(schema.encode(sample)) == sample


def test_unsupported_readings_are_null_not_zero(open_source):
    source = open_source(gpus=1, unsupported=ALL_READINGS)
    sample = only_sample(source)

    gpu = sample["gpus"][0]
    assert_all_readings_null(gpu)
    assert gpu["xid"] is None  # no XID events: the xid check is unknown, not a pass
    assert gpu["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert gpu["lost"] is False and "error" not in gpu
    assert schema.parse(schema.encode(sample)) == sample


def test_a_fan_less_gpu_reports_null_fan_and_everything_else(open_source):
    gpu = only_sample(open_source(gpus=1, unsupported=["fan"]))["gpus"][0]

    assert gpu["fan"] is None
    assert gpu["temp"] == 60 and gpu["power"] == 612.4


def test_a_lost_gpu_stays_in_the_sample_and_the_others_report_fully(open_source):
    source = open_source(gpus=4, lost=[2])
    sample = only_sample(source)

    assert [gpu["index"] for gpu in sample["gpus"]] == [0, 1, 2, 3]
    lost = sample["gpus"][2]
    assert lost["lost"] is True
    assert lost["uuid"] is None  # lost before NVML could tell us
    assert_all_readings_null(lost)
    for index in (0, 1, 3):
        assert_full(sample["gpus"][index], index)
    assert schema.parse(schema.encode(sample)) == sample


def test_a_gpu_lost_between_samples_keeps_its_uuid_and_reports_its_last_xid(open_source, fake_library):
    source = open_source(gpus=2)
    assert only_sample(source)["gpus"][1]["lost"] is False

    fake_nvml.configure(fake_library, fake_nvml.config(gpus=2, lost=[1], xid=["1:79"]))
    gpu0, gpu1 = only_sample(source)["gpus"]

    assert gpu1["lost"] is True
    assert gpu1["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000001"
    assert gpu1["xid"] == [79]  # "GPU has fallen off the bus"
    assert_all_readings_null(gpu1)
    assert_full(gpu0, 0)


def test_xid_events_are_reported_once_on_their_gpu(open_source):
    source = open_source(gpus=2, xid=["1:48", "1:63"])

    first = only_sample(source)["gpus"]
    second = only_sample(source)["gpus"]

    assert (first[0]["xid"], first[1]["xid"]) == ([], [48, 63])
    assert (second[0]["xid"], second[1]["xid"]) == ([], [])


def test_the_energy_counter_grows_at_the_power_the_gpu_reports(open_source):
    source = open_source(gpus=2, energy_interval=0)  # read at every sample
    readings = []  # (monotonic s, sample)
    for _ in range(11):  # about 1 s
        readings.append((time.monotonic(), only_sample(source)))
        time.sleep(0.1)

    (first_at, first), (last_at, last) = readings[0], readings[-1]
    for index in (0, 1):
        watts = last["gpus"][index]["power"]
        joules = (last["gpus"][index]["energy"] - first["gpus"][index]["energy"]) / 1000
        assert joules / (last_at - first_at) == pytest.approx(watts, rel=0.01)


def test_the_energy_counter_is_read_once_per_energy_interval_and_repeated_in_between(open_source):
    source = open_source(gpus=1, energy_interval=0.5)
    readings = []  # (monotonic s, counter)
    while not readings or readings[-1][0] - readings[0][0] < 1.2:
        readings.append((time.monotonic(), only_sample(source)["gpus"][0]["energy"]))
        time.sleep(0.1)
    changes = [at for (at, counter), (_, before) in zip(readings[1:], readings, strict=False) if counter != before]
    assert changes  # the counter runs at 612 W: each read gives a new value
    reads = [readings[0][0], *changes]
    # Samples come every 0.1 s, the counter no more often than every 0.5 s (less a margin: a read lands
    # some ms after its sample starts, and the times here are the samples').
    assert all(later - earlier >= 0.45 for earlier, later in zip(reads, reads[1:], strict=False))


def test_throttle_reasons_are_decoded_by_name(open_source):
    # sw_power_cap 0x4 | sw_thermal 0x20 | hw_thermal 0x40 | hw_power_brake 0x80 | board limit 0x200
    gpu = only_sample(open_source(gpus=1, throttle="0x2e4"))["gpus"][0]

    # board limit (0x200) is not one of the schema's reasons and is left out
    assert gpu["throttle"] == ["sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]


def test_no_throttle_reason_is_an_empty_list_not_null(open_source):
    assert only_sample(open_source(gpus=1, throttle="0"))["gpus"][0]["throttle"] == []


def test_processes_are_named_from_proc_and_listed_once(open_source):
    me = os.getpid()
    source = open_source(gpus=2, procs=[f"0:{me}:60129542144:c", f"0:{me}:60129542144:g", f"1:{MISSING_PID}:na:c"])
    gpu0, gpu1 = only_sample(source)["gpus"]

    import pwd

    (process,) = gpu0["processes"]
    assert process["pid"] == me and process["mem_used"] == 60129542144
    assert process["name"] == Path(f"/proc/{me}/comm").read_text().strip()
    assert process["user"] == pwd.getpwuid(os.getuid()).pw_name
    # Gone (or in another PID namespace), and a driver that cannot tell its memory.
    assert gpu1["processes"] == [{"pid": MISSING_PID, "name": None, "user": None, "mem_used": None,
                                  **dict.fromkeys(schema.PROCESS_IDENTITY), "sm_util": None, "mem_util": None}]


def test_nvlink_throughput_is_computed_from_the_counters(open_source):
    source = open_source(gpus=1)
    only_sample(source)
    time.sleep(0.05)
    gpu = only_sample(source)["gpus"][0]

    # 4 links x 2500000 KiB/s TX and 1250000 KiB/s RX
    assert gpu["nvlink_tx"] == pytest.approx(4 * 2500000 * 1024, rel=1e-3)
    assert gpu["nvlink_rx"] == pytest.approx(4 * 1250000 * 1024, rel=1e-3)


def test_a_hung_gpu_costs_only_its_own_readings_and_is_not_read_again_until_it_returns(open_source, fake_library):
    # A 3 s hang against a 0.2 s read deadline: a sample that waited for it would take 3 s.
    source = open_source(gpus=3, hang="1:3.0", read_timeout=0.2)
    calls_before = fake_library.fakeNvmlUtilizationCalls(1)

    started = time.monotonic()
    sample = only_sample(source)
    assert time.monotonic() - started < 1.5
    stuck = sample["gpus"][1]
    assert stuck["error"] == TIMED_OUT
    assert stuck["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000001"  # learnt before the hung call
    assert_all_readings_null(stuck)
    assert_full(sample["gpus"][0], 0)
    assert_full(sample["gpus"][2], 2)
    assert schema.parse(schema.encode(sample)) == sample

    started = time.monotonic()
    assert only_sample(source)["gpus"][1]["error"] == TIMED_OUT
    assert time.monotonic() - started < 1.5

    # Nothing was queued behind the stuck call: when it returns, no second read starts.
    fake_nvml.configure(fake_library, fake_nvml.config(gpus=3))
    time.sleep(3.2)
    assert fake_library.fakeNvmlUtilizationCalls(1) == calls_before + 1
    assert_full(only_sample(source)["gpus"][1], 1)
    assert fake_library.fakeNvmlUtilizationCalls(1) == calls_before + 2


def test_driver_not_loaded_is_one_line(open_source):
    with pytest.raises(SourceUnavailable) as raised:
        open_source(gpus=1, init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED

    message = str(raised.value)
    assert message.startswith("NVML: driver not loaded")
    assert "\n" not in message


def test_nvml_going_away_while_sampling_raises_source_unavailable(open_source, fake_library):
    source = open_source(gpus=2)
    only_sample(source)

    fake_nvml.configure(fake_library, fake_nvml.config(gpus=2, device_error=9))
    with pytest.raises(SourceUnavailable, match="^NVML: driver not loaded"):
        source.sample()
    source.close()
    source.close()  # safe twice


def test_an_unexpected_nvml_error_nulls_readings_and_is_logged_once(open_source, fake_library, caplog, monkeypatch):
    # "Once" is per process: start from a collector that has warned about nothing yet.
    monkeypatch.setattr("collectors.nvml._warned", set())
    source = open_source(gpus=1, energy_interval=0)  # every reading asked at every sample
    only_sample(source)

    fake_nvml.configure(fake_library, fake_nvml.config(gpus=1, device_error=999))  # NVML_ERROR_UNKNOWN
    first = only_sample(source)["gpus"][0]
    warnings = len(caplog.records)
    second = only_sample(source)["gpus"][0]

    for gpu in (first, second):
        assert gpu["lost"] is False
        # What the board and slot are was read before the error and stays true.
        static = {name: gpu.pop(name) for name in STATIC_READINGS}
        assert static == {"pcie_gen_max": 5, "pcie_width_max": 16, "vbios": "96.00.99.00.01", "nvlink_links": 4}
        assert_all_readings_null({**gpu, **dict.fromkeys(STATIC_READINGS)})
    assert any("nvmlDeviceGetUtilizationRates failed (Unknown Error)" in r.getMessage() for r in caplog.records)
    assert len(caplog.records) == warnings  # nothing new the second time


# --- subprocesses: the fake (or no NVML at all) on the library path ---

PRINT_SAMPLE = (
    "import json; from collectors.nvml import NvmlSource; from collectors.sources import SourceUnavailable\n"
    "try:\n"
    "    source = NvmlSource('gpu-01', 1.0)\n"
    "except SourceUnavailable as exc:\n"
    "    print('unavailable:', exc)\n"
    "else:\n"
    "    print(json.dumps(source.sample()[0]))\n"
)


def run_python(args, env, timeout=60):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def env_without_nvml() -> dict:
    return {key: value for key, value in os.environ.items() if key not in ("LD_LIBRARY_PATH", "FAKE_NVML_CONFIG")}


def test_without_libnvidia_ml_the_source_is_unavailable_with_one_line():
    result = run_python(["-c", PRINT_SAMPLE], env_without_nvml())

    assert result.returncode == 0, result.stderr
    if not result.stdout.startswith("unavailable:"):
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    assert result.stdout == "unavailable: NVML: libnvidia-ml.so.1 not found — is the NVIDIA driver installed?\n"


def test_an_older_driver_without_the_newer_entry_points_still_reports():
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=1, throttle="0x24"), variant="r470")
    result = run_python(["-c", PRINT_SAMPLE], env)

    assert result.returncode == 0, result.stderr
    gpu = json.loads(result.stdout)["gpus"][0]
    assert gpu["mem_used"] == 61203283968 + 563085312  # the v1 call counts reserved memory as used
    assert gpu["throttle"] == ["sw_power_cap", "sw_thermal_slowdown"]  # from ClocksThrottleReasons


def collector_cli(*args):
    if not (REPO / "collectors" / "__main__.py").exists():
        pytest.fail("collectors/__main__.py is missing: `python -m collectors` is the collector's CLI")
    return ["-m", "collectors", "--source", "nvml", "--node-name", "gpu-07", "--once", "--stdout", *args]


def test_the_collector_cli_prints_a_valid_nvml_sample():
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=8, lost=[5]))
    result = run_python(collector_cli(), env)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    sample = schema.parse(lines[0])
    assert sample["node"] == "gpu-07"
    assert [gpu["lost"] for gpu in sample["gpus"]] == [False] * 5 + [True] + [False] * 2
    assert sample["gpus"][0]["power"] == 612.4


def test_the_collector_cli_without_nvml_exits_non_zero_with_one_line():
    result = run_python(collector_cli(), env_without_nvml())

    if result.returncode == 0:
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "libnvidia-ml.so.1 not found" in lines[0]
