"""Process descriptions kept across samples (collectors/attribution.py, ProcessDescriptions).

A process is known by its pid and its start time in ``/proc/<pid>/stat``. The
recorded tree (tests/data/procfs) is copied where a test changes it; the second
recorded tree (tests/data/procfs-reused) holds pid 48213 handed by the kernel
to another user's process, with the same name and a later start time.
"""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from collectors.attribution import ProcessDescriptions, describe_process, read_identity
from collectors.nvml import NvmlSource
from tests import fake_nvml
from tests.test_attribution import GONE, RECORDED, RECORDED_PROCESSES, unknown_ldap_uids  # noqa: F401 (fixture)
from tests.test_collector_nvml import fake_library  # noqa: F401 (fixture: the stand-in loaded, or a skip)

REUSED = RECORDED.parent / "procfs-reused"
PID = 48213
# What the recorded tree says of PID, and what the reused one says of its new process
FIRST_OWNER = RECORDED_PROCESSES[PID]
NEW_OWNER = {"name": "python", "user": "104587", "cmd": "python eval.py --checkpoint ckpt/step-9000 --split test",
             "job": "5702", "step": "0", "pod_uid": None, "container": None}
GIB = 2**30


@pytest.fixture
def procfs(tmp_path):
    """A copy of the recorded tree, for a test to change."""
    return shutil.copytree(RECORDED, tmp_path / "proc")


def reuse_pid(procfs):
    """Hand PID to the reused tree's process, as the kernel does once PID's process has ended."""
    shutil.rmtree(procfs / str(PID))
    shutil.copytree(REUSED / str(PID), procfs / str(PID))


@pytest.mark.parametrize("pid", RECORDED_PROCESSES)
def test_a_kept_description_is_the_one_procfs_gave_with_the_samples_own_memory(pid, unknown_ldap_uids):  # noqa: F811
    descriptions = ProcessDescriptions(RECORDED)
    first = descriptions.describe(pid, GIB)
    descriptions.new_sample()

    assert descriptions.describe(pid, 2 * GIB) == {**first, "mem_used": 2 * GIB}
    assert first == {"pid": pid, "mem_used": GIB, **RECORDED_PROCESSES[pid]} == describe_process(pid, GIB, RECORDED)


def test_a_process_is_read_once_and_kept_while_its_start_time_and_name_stay(procfs, unknown_ldap_uids):  # noqa: F811
    descriptions = ProcessDescriptions(procfs)
    descriptions.describe(PID, GIB)
    # Were the files read again, this would show: the process keeps its pid, start time and name.
    (procfs / str(PID) / "cmdline").write_bytes(b"python\0other.py\0")

    assert descriptions.describe(PID, GIB)["cmd"] == FIRST_OWNER["cmd"]  # the same sample
    descriptions.new_sample()
    assert descriptions.describe(PID, GIB)["cmd"] == FIRST_OWNER["cmd"]  # the next


def test_a_pid_handed_to_a_new_process_is_read_afresh_not_billed_to_its_previous_owner(
        procfs, unknown_ldap_uids):  # noqa: F811
    descriptions = ProcessDescriptions(procfs)
    assert descriptions.describe(PID, GIB) == {"pid": PID, "mem_used": GIB, **FIRST_OWNER}
    reuse_pid(procfs)
    descriptions.new_sample()

    assert descriptions.describe(PID, GIB) == {"pid": PID, "mem_used": GIB, **NEW_OWNER}


def test_a_process_that_renames_itself_is_read_again(procfs, unknown_ldap_uids):  # noqa: F811
    descriptions = ProcessDescriptions(procfs)
    descriptions.describe(PID, GIB)
    # setproctitle, as Ray's workers do: the name in stat and comm and the command line change
    folder = procfs / str(PID)
    (folder / "stat").write_text((folder / "stat").read_text().replace("(python)", "(ray::Trainer)"))
    (folder / "comm").write_text("ray::Trainer\n")
    (folder / "cmdline").write_bytes(b"ray::Trainer.train\0")
    descriptions.new_sample()

    assert descriptions.describe(PID, GIB) == {"pid": PID, "mem_used": GIB,
                                               **FIRST_OWNER, "name": "ray::Trainer", "cmd": "ray::Trainer.train"}


def test_a_description_is_read_again_once_older_than_its_max_age(procfs, unknown_ldap_uids):  # noqa: F811
    descriptions = ProcessDescriptions(procfs, max_age=0)
    descriptions.describe(PID, GIB)
    (procfs / str(PID) / "cmdline").write_bytes(b"python\0other.py\0")  # moved, renamed: what max_age catches

    assert descriptions.describe(PID, GIB)["cmd"] == FIRST_OWNER["cmd"]  # still once a sample
    descriptions.new_sample()
    assert descriptions.describe(PID, GIB)["cmd"] == "python other.py"


def test_a_process_without_a_readable_stat_is_read_every_sample(procfs):
    descriptions = ProcessDescriptions(procfs)
    (procfs / str(PID) / "stat").unlink()  # as in another PID namespace's view: nothing tells it is the same
    descriptions.describe(PID, GIB)
    reuse_pid(procfs)
    (procfs / str(PID) / "stat").unlink()
    descriptions.new_sample()

    assert descriptions.describe(PID, GIB)["cmd"] == NEW_OWNER["cmd"]


def started(program: str | Path) -> subprocess.Popen:
    """A Python child run as ``program``, once its exec is over: Popen may return while exec has named
    the process and not yet set its command line."""
    child = subprocess.Popen([program, "-c", "print(flush=True); import time; time.sleep(60)"],
                             stdout=subprocess.PIPE)
    assert child.stdout is not None  # stdout=PIPE
    child.stdout.readline()
    return child


def test_the_readers_listing_a_process_in_one_sample_read_it_once(procfs):
    # Its command line is a FIFO: the first reader blocks on it until the test writes it once, and a
    # second reader of the files would block for ever. All eight must come back with that one read.
    cmdline = procfs / str(PID) / "cmdline"
    cmdline.unlink()
    os.mkfifo(cmdline)
    descriptions = ProcessDescriptions(procfs)
    results: list[dict] = []
    readers = [threading.Thread(target=lambda: results.append(descriptions.describe(PID, GIB)), daemon=True)
               for _ in range(8)]
    for reader in readers:
        reader.start()
    try:
        with cmdline.open("wb") as fifo:  # waits for the first reader to open it
            fifo.write(b"python\0once.py\0")
        for reader in readers:
            reader.join(timeout=10)
        assert [process["cmd"] for process in results] == ["python once.py"] * 8
    finally:
        release_blocked_readers(cmdline)


def release_blocked_readers(fifo):
    """End the reads still waiting on ``fifo`` (a failed test's): each gets an empty file."""
    while True:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader waits
            return


def test_a_live_process_is_kept_then_read_as_gone_once_it_ends_and_forgotten_once_unlisted():
    child = started(sys.executable)
    try:
        descriptions = ProcessDescriptions()
        first = descriptions.describe(child.pid, GIB)
        descriptions.new_sample()
        assert descriptions.describe(child.pid, GIB) == first == describe_process(child.pid, GIB)
        assert first["cmd"] is not None and first["cmd"].endswith("time.sleep(60)")
    finally:
        child.kill()
        child.wait()
    descriptions.new_sample()
    # The driver may list an ended process for a sample more: it is not given its old description.
    assert descriptions.describe(child.pid, GIB) == {"pid": child.pid, "mem_used": GIB, **GONE}
    descriptions.new_sample()
    assert child.pid in descriptions  # the last sample listed it
    descriptions.new_sample()
    assert child.pid not in descriptions and len(descriptions) == 0


def test_it_keeps_at_most_max_size_descriptions_forgetting_the_least_recently_listed():
    descriptions = ProcessDescriptions(RECORDED, max_size=2)
    first, second, third = list(RECORDED_PROCESSES)[:3]
    for pid in (first, second, first, third):
        descriptions.describe(pid, GIB)

    assert len(descriptions) == 2 and first in descriptions and second not in descriptions


def test_the_start_time_and_name_are_read_from_a_live_process_stat_even_with_parentheses_in_the_name(tmp_path):
    # The name is the executable's file name; ")" and spaces in it must not shift the fields after it.
    program = tmp_path / "a) S 1 (b"
    program.symlink_to(os.path.realpath(sys.executable))
    child = started(program)
    try:
        identities = read_identity(child.pid), read_identity(os.getpid())
        # psutil's: its boot time (which a VM's clock moves) + stat's field 22 / clock ticks
        created = psutil.Process(child.pid).create_time() - psutil.Process().create_time()
    finally:
        child.kill()
        child.wait()

    assert identities[0] is not None and identities[1] is not None
    assert identities[0].name == "a) S 1 (b"
    assert (identities[0].start - identities[1].start) / os.sysconf("SC_CLK_TCK") == pytest.approx(created, abs=1e-6)


def test_the_nvml_source_reads_a_process_on_a_gpu_and_an_instance_afresh_once_its_pid_is_reused(
        fake_library, monkeypatch, procfs, unknown_ldap_uids):  # noqa: F811
    # PID on GPU 0 whole and on GPU 1's one MIG instance
    layout = {"gpus": 2, "mig": "1:1", "mig_on": 1, "mig_devices": ["1:0:7:0:1g.10gb"],
              "procs": [f"0:{PID}:{GIB}:c", f"1:{PID}:{GIB}:c:7:0"]}
    monkeypatch.setenv("FAKE_NVML_CONFIG", fake_nvml.config(**layout))
    monkeypatch.setattr(psutil, "PROCFS_PATH", psutil.PROCFS_PATH)  # the source points psutil at the copy
    source = NvmlSource("gpu-07", 1.0, procfs=procfs)
    try:
        before = source.sample()[0]["gpus"]
        reuse_pid(procfs)
        after = source.sample()[0]["gpus"]
    finally:
        source.close()

    def owners(gpus):
        lists = [gpus[0]["processes"], gpus[1]["processes"], gpus[1]["mig"][0]["processes"]]
        return [{key: process[key] for key in FIRST_OWNER} for processes in lists for process in processes]

    assert owners(before) == [FIRST_OWNER] * 3
    assert owners(after) == [NEW_OWNER] * 3
