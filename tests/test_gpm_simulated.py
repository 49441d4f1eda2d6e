"""The simulated fleet's SM, tensor and DRAM activity: it follows each job's kind."""

import statistics

from collectors.simulated import ACTIVITY_READINGS, NOTEBOOK_GPU, NOTEBOOK_NODE, STALLED, TRAIN, SimulatedFleet
from tests import test_collector_simulated
from tests.test_collector_simulated import advance, all_gpus, fleet_with_clock, gpu_series, stretches

hour = test_collector_simulated.hour  # one simulated hour of a 4-node fleet (a fixture)


def running(hour, kind):
    """Every reading of a GPU running a job of ``kind`` past its start-up (its first minute)."""
    first_seen: dict[str, int] = {}
    for step, samples in enumerate(hour):
        for sample in samples.values():
            for gpu in sample["gpus"]:
                for process in gpu["processes"]:
                    if process["cmd"] in kind.commands and step - first_seen.setdefault(process["job"], step) > 60:
                        yield gpu


def test_busy_training_keeps_its_sms_and_tensor_pipes_working(hour):
    busy = [gpu for gpu in running(hour, TRAIN) if gpu["util"] >= 90]
    assert len(busy) > 1000
    assert statistics.mean(gpu["sm_active"] for gpu in busy) > 0.7
    assert statistics.mean(gpu["tensor_active"] for gpu in busy) > 0.3
    assert all(0 < gpu["dram_active"] < 1 for gpu in busy)


def test_the_stalled_loader_runs_kernels_for_minutes_with_its_sms_nearly_idle(hour):
    stalled = [(int(process["job"]), node, gpu["index"]) for node, sample in hour[0].items()
               for gpu in sample["gpus"] for process in gpu["processes"] if process["cmd"] in STALLED.commands]
    _, node, index = min(stalled)  # the one that started with the fleet
    series = gpu_series(hour, node, index)[60:]  # past its start-up

    busy = [gpu for gpu in series if gpu["util"] >= 80]
    assert busy and all(gpu["sm_active"] < 0.2 and gpu["tensor_active"] < 0.05 for gpu in busy)
    # "kernels run, SMs idle": at least 90 % utilization with under 20 % SM activity, for a minute or more
    flagged = stretches([gpu["util"] >= 90 and gpu["sm_active"] < 0.2 for gpu in series])
    assert max(length for is_flagged, length in flagged if is_flagged) >= 60


def test_the_notebook_and_idle_gpus_read_zero_activity(hour):
    node = f"sim-{NOTEBOOK_NODE + 1:02d}"
    for gpu in gpu_series(hour, node, NOTEBOOK_GPU):
        assert [gpu[name] for name in ACTIVITY_READINGS] == [0, 0, 0]
    idle = [gpu for gpu in all_gpus(hour) if not gpu["processes"]]
    assert idle and all([gpu[name] for name in ACTIVITY_READINGS] == [0, 0, 0] for gpu in idle)


def test_a_lost_gpu_reports_null_activity():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-01", 2, "lost")
    lost = advance(fleet, clock)["sim-01"]["gpus"][2]
    assert lost["lost"] is True and [lost[name] for name in ACTIVITY_READINGS] == [None, None, None]


def test_activity_is_deterministic_for_a_seed():
    def readings(seed):
        fleet, clock = fleet_with_clock(nodes=3, seed=seed)
        return [[[gpu[name] for name in ACTIVITY_READINGS] for gpu in advance(fleet, clock)[node]["gpus"]]
                for _ in range(120) for node in fleet.node_names]

    assert readings(5) == readings(5)
    assert readings(5) != readings(6)


def test_every_model_reports_activity():
    for sample in SimulatedFleet(4, 8, 1.0, seed=3).sample():
        assert all(isinstance(gpu[name], float) for gpu in sample["gpus"] for name in ACTIVITY_READINGS)
