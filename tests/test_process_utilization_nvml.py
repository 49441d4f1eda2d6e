"""Per-process SM and memory utilization from the nvml source (nvmlDeviceGetProcessUtilization), against the
fake libnvidia-ml.so.1 through the real binding.

The fake (tests/fake_nvml/fake_nvml.c) follows the NVML header: the driver samples each process every
166,667 µs and keeps six samples; a call returns those newer than lastSeenTimeStamp, NOT_FOUND where there
are none, NOT_SUPPORTED where unsupported=proc_util and on a GPU with MIG on. A process of procs= without a
proc_util= entry has no sample (NVML leaves out a process idle all period).
"""

import os
import time

import pynvml

from gpulse import schema
from tests import test_collector_nvml, test_mig_nvml
from tests.test_collector_nvml import MISSING_PID, only_sample

fake_library = test_collector_nvml.fake_library
open_source = test_collector_nvml.open_source

PERIOD = 0.166667  # s, the fake driver's sampling period
OTHER_PID = MISSING_PID - 1


def shares(gpu: dict) -> dict:
    return {process["pid"]: (process["sm_util"], process["mem_util"]) for process in gpu["processes"]}


def test_two_processes_time_sliced_on_one_gpu_are_told_apart(open_source):
    me = os.getpid()
    source = open_source(gpus=2, procs=[f"0:{me}:1073741824:c", f"0:{OTHER_PID}:2147483648:c",
                                        f"1:{me}:1073741824:c"],
                         proc_util=[f"0:{me}:62:31", f"0:{OTHER_PID}:27:9", f"1:{me}:100:0"])
    gpu0, gpu1 = only_sample(source)["gpus"]

    # The newest of each process's samples, never their sum across the several the driver keeps.
    assert shares(gpu0) == {me: (62, 31), OTHER_PID: (27, 9)}
    assert shares(gpu1) == {me: (100, 0)}


def test_a_process_without_a_sample_is_null_never_zero(open_source):
    me = os.getpid()
    source = open_source(procs=[f"0:{me}:1073741824:c", f"0:{OTHER_PID}:na:c"], proc_util=[f"0:{me}:40:20"])
    (gpu,) = only_sample(source)["gpus"]

    assert shares(gpu) == {me: (40, 20), OTHER_PID: (None, None)}


def test_a_gpu_that_does_not_offer_it_gives_null(open_source):
    me = os.getpid()
    source = open_source(procs=[f"0:{me}:1073741824:c"], proc_util=[f"0:{me}:40:20"], unsupported=["proc_util"])
    (gpu,) = only_sample(source)["gpus"]

    assert shares(gpu) == {me: (None, None)}


def samples_since(handle, last_seen: int) -> list:
    try:
        return pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen)
    except pynvml.NVMLError_NotFound:  # none newer
        return []


def test_only_samples_newer_than_the_timestamp_asked_for_are_returned(open_source):
    me = os.getpid()
    open_source(procs=[f"0:{me}:1073741824:c"], proc_util=[f"0:{me}:40:20"])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    everything = samples_since(handle, 0)
    stamps = sorted(sample.timeStamp for sample in everything)
    newest = stamps[-1]

    assert len(everything) == 6  # the six samples the driver keeps
    assert len(samples_since(handle, stamps[2])) >= 3
    assert all(sample.timeStamp > stamps[2] for sample in samples_since(handle, stamps[2]))
    assert all(sample.timeStamp > newest for sample in samples_since(handle, newest))


def test_each_read_asks_for_the_samples_since_the_newest_one_read_before(open_source, monkeypatch):
    me = os.getpid()
    source = open_source(procs=[f"0:{me}:1073741824:c"], proc_util=[f"0:{me}:40:20"])
    asked, answered = [], []
    real = pynvml.nvmlDeviceGetProcessUtilization

    def observed(handle, last_seen):
        asked.append(last_seen)
        answer = real(handle, last_seen)  # raises NOT_FOUND as the library does
        answered.append(max(sample.timeStamp for sample in answer))
        return answer

    monkeypatch.setattr(pynvml, "nvmlDeviceGetProcessUtilization", observed)
    only_sample(source)
    time.sleep(PERIOD * 1.2)
    assert shares(only_sample(source)["gpus"][0]) == {me: (40, 20)}

    assert asked == [0, answered[0]]  # the first read takes all the driver keeps


def test_mig_instances_processes_are_null(open_source):
    me = os.getpid()
    source = open_source(**test_mig_nvml.mig_gpu(procs=[f"0:{me}:1073741824:c:1:0"], proc_util=[f"0:{me}:40:20"]))
    (gpu,) = only_sample(source)["gpus"]

    (process,) = gpu["mig"][0]["processes"]
    assert (process["sm_util"], process["mem_util"]) == (None, None)
    assert shares(gpu) == {me: (None, None)}


def test_the_sample_passes_the_contract_unchanged(open_source):
    me = os.getpid()
    source = open_source(procs=[f"0:{me}:1073741824:c"], proc_util=[f"0:{me}:40:20"])
    sample = only_sample(source)

    assert schema.parse(schema.encode(sample)) == sample
