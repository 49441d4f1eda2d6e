"""The simulated fleet's MIG node: its H100s split into MIG instances, each running jobs with owners."""

import copy
import statistics
import time

import pytest

from collectors.simulated import (
    ACTIVITY_READINGS,
    EVAL,
    MIG_LAYOUTS,
    MIG_RESERVED_MEM,
    MIG_SLICES,
    MIG_STALLED_INSTANCE,
    NOTEBOOK_USER,
    STALLED,
    TRAIN,
    SimulatedFleet,
)
from dashboard.live.models import GpuRollup
from gpulse.schema import MAX_MIG_INSTANCES, encode, read, read_fast, validate
from gpulse.usage import owner
from tests import test_ingest
from tests.test_collector_simulated import FakeClock, advance
from tests.test_ingest import xadd

frames = test_ingest.frames
make_ingest = test_ingest.make_ingest

MIG_NODE = "sim-03"
STEPS = 1800  # s: half an hour, sampled every second


def mig_fleet(seed=5):
    clock = FakeClock()
    return SimulatedFleet(3, 8, 1.0, seed=seed, clock=clock, mig_node=MIG_NODE), clock


@pytest.fixture(scope="module")
def half_hour():
    """The MIG node's sample every second for half an hour, and the whole fleet's first."""
    fleet, clock = mig_fleet()
    first = advance(fleet, clock)
    return first, [first[MIG_NODE]] + [advance(fleet, clock)[MIG_NODE] for _ in range(STEPS - 1)]


def instances(samples):
    return [(gpu, instance) for sample in samples for gpu in sample["gpus"] for instance in gpu["mig"]]


def slices(profile: str) -> int:
    return int(profile.partition("g.")[0])


def test_mig_samples_pass_the_sample_contract_unchanged(half_hour):
    first, series = half_hour
    for sample in [*first.values(), *series[::60]]:
        checked = copy.deepcopy(sample)
        assert validate(checked) == 0 and checked == sample
        raw = encode(sample)
        assert read_fast(raw) == sample and read(raw) == (sample, 0)


def test_only_the_mig_node_runs_mig_and_its_gpus_take_the_layouts_in_turn(half_hour):
    first, _ = half_hour
    for node, sample in first.items():
        if node != MIG_NODE:
            assert all("mig" not in gpu and gpu["mig_enabled"] is False for gpu in sample["gpus"])
    uuids = []
    for gpu in first[MIG_NODE]["gpus"]:
        assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["mig_enabled"] is True
        layout = MIG_LAYOUTS[gpu["index"] % len(MIG_LAYOUTS)]
        assert [(i["gpu_instance"], i["compute_instance"], i["profile"]) for i in gpu["mig"]] == [
            (gpu_instance, 0, profile.name) for gpu_instance, profile in layout]
        assert len(gpu["mig"]) <= MAX_MIG_INSTANCES
        assert sum(slices(instance["profile"]) for instance in gpu["mig"]) == MIG_SLICES
        assert sum(instance["mem_total"] for instance in gpu["mig"]) <= gpu["mem_total"]
        uuids += [instance["uuid"] for instance in gpu["mig"]]
    assert all(uuid.startswith("MIG-") for uuid in uuids) and len(set(uuids)) == len(uuids) == 34
    again = SimulatedFleet(3, 8, 1.0, seed=99, mig_node=MIG_NODE).sample()[2]
    assert [i["uuid"] for gpu in again["gpus"] for i in gpu["mig"]] == uuids, "stable across restarts"


def test_the_board_keeps_its_readings_with_no_utilization_and_its_instances_processes(half_hour):
    _, series = half_hour
    for sample in series:
        for gpu in sample["gpus"]:
            assert gpu["util"] is None and gpu["mem_util"] is None, "NVML: NOT_SUPPORTED in MIG mode, never 0"
            assert gpu["temp"] > 0 and 0 < gpu["power"] <= gpu["power_limit"] and gpu["sm_clock"] > 0
            assert gpu["processes"] == [p for instance in gpu["mig"] for p in instance["processes"]]
            assert sum(instance["mem_used"] for instance in gpu["mig"]) < gpu["mem_used"] <= gpu["mem_total"]
            board = {name: sum(slices(i["profile"]) * i[name] for i in gpu["mig"]) / MIG_SLICES
                     for name in ACTIVITY_READINGS}
            assert all(gpu[name] == pytest.approx(board[name], abs=0.002) for name in ACTIVITY_READINGS)
            assert ("gpu_idle" in gpu["throttle"]) == (not gpu["processes"])


def test_each_instance_runs_one_job_with_its_owner_within_its_memory(half_hour):
    _, series = half_hour
    jobs = {}
    for _, instance in instances(series):
        assert MIG_RESERVED_MEM <= instance["mem_used"] <= instance["mem_total"]
        assert all(0 <= instance[name] <= 1 for name in ACTIVITY_READINGS)
        if not instance["processes"]:
            continue
        (process,) = instance["processes"]
        assert process["pid"] > 0 and process["step"] == "0" and process["user"] != NOTEBOOK_USER
        assert process["cmd"] in TRAIN.commands + EVAL.commands + STALLED.commands
        assert 0 < process["mem_used"] == instance["mem_used"] - MIG_RESERVED_MEM
        assert owner(instance) == (process["user"], process["job"], "")
        where = (instance["uuid"], process["user"], process["cmd"])
        assert jobs.setdefault(process["job"], where) == where, "a job keeps its instance, user and command"
    kinds = {cmd.split()[1] for _, _, cmd in jobs.values()}
    assert kinds == {"train.py", "eval.py"} and len(jobs) > 20


def test_idle_instances_read_zero_activity_and_busy_ones_follow_their_jobs_kind(half_hour):
    _, series = half_hour
    pairs = instances(series[120:])  # past the start-up of the jobs found running
    idle = [instance for _, instance in pairs if not instance["processes"]]
    assert idle and all([instance[name] for name in ACTIVITY_READINGS] == [0, 0, 0] for instance in idle)
    assert all(instance["mem_used"] == MIG_RESERVED_MEM for instance in idle)

    def running(kind):
        return [i for _, i in pairs if i["processes"] and i["processes"][0]["cmd"] in kind.commands]

    training = [i for i in running(TRAIN) if i["sm_active"] >= 0.7]
    assert len(training) > 1000 and statistics.mean(i["tensor_active"] for i in training) > 0.3
    stalled = running(STALLED)
    assert stalled and all(i["sm_active"] < 0.2 and i["tensor_active"] < 0.05 for i in stalled)


def test_the_mig_node_starts_with_a_stalled_loader_and_jobs_come_and_go(half_hour):
    _, series = half_hour
    stalled = series[0]["gpus"][0]["mig"][MIG_STALLED_INSTANCE]
    assert stalled["processes"][0]["cmd"] in STALLED.commands
    started = ended = 0
    for before, after in zip(instances(series[:-1]), instances(series[1:]), strict=True):
        started += not before[1]["processes"] and bool(after[1]["processes"])
        ended += bool(before[1]["processes"]) and not after[1]["processes"]
    assert started >= 3 and ended >= 3


def test_power_and_temperature_follow_the_instances_load():
    fleet, clock = mig_fleet()
    for _ in range(300):
        gpus = advance(fleet, clock)[MIG_NODE]["gpus"]
    hot = max(gpus, key=lambda gpu: gpu["power"])
    assert hot["power"] > 0.3 * hot["power_limit"] and hot["sm_active"] > 0.3
    fleet.inject(MIG_NODE, hot["index"], "lost")  # its jobs die: back on the bus, its instances are free
    lost = advance(fleet, clock)[MIG_NODE]["gpus"][hot["index"]]
    assert lost["lost"] is True and lost.get("mig") is None
    fleet.inject(MIG_NODE, hot["index"], "clear")
    # Until the scheduler places a job there (seconds to minutes), a board of idle instances: it cools.
    emptied = []
    for _ in range(60):
        gpu = advance(fleet, clock)[MIG_NODE]["gpus"][hot["index"]]
        if gpu["processes"]:
            break
        emptied.append(gpu)
    assert emptied and all(not instance["processes"] for gpu in emptied for instance in gpu["mig"])
    assert all(gpu["power"] < 0.2 * gpu["power_limit"] and gpu["sm_active"] == 0 for gpu in emptied)
    temps = [gpu["temp"] for gpu in emptied]
    assert temps == sorted(temps, reverse=True) and temps[0] <= hot["temp"]


@pytest.mark.django_db
def test_the_mig_nodes_samples_go_through_ingest_whole(redis_client, make_ingest, frames):
    fleet = SimulatedFleet(3, 8, 1.0, seed=5, mig_node=MIG_NODE)
    ingest = make_ingest()
    for sample in fleet.sample():
        xadd(redis_client, encode(sample))
    assert ingest.read(block_ms=10) == 3
    ingest.emit(time.time())
    ingest.flush()

    assert (ingest.rejected, ingest.nulled) == (0, 0)
    assert set(frames[0]["nodes"]) == {"sim-01", "sim-02", MIG_NODE}
    rows = GpuRollup.objects.filter(node=MIG_NODE)
    assert len(rows) == 8 and all(row.util_mean is None and row.sm_active_mean is not None for row in rows)


@pytest.mark.parametrize("mig_node, message", [
    ("sim-09", "no node sim-09 to run MIG"),
    ("sim-01", "holds dana's notebook"),
])
def test_the_mig_node_must_be_a_node_of_the_fleet_without_the_notebook(mig_node, message):
    with pytest.raises(ValueError, match=message):
        SimulatedFleet(3, 8, 1.0, seed=1, mig_node=mig_node)
