"""The simulated fleet: valid samples, believable dynamics, faults, faults from Redis."""

import logging
import statistics
import time
from itertools import groupby, pairwise

import pytest
import redis

from collectors.health_checks import HealthChecks
from collectors.simulated import (
    ACTIVITY_READINGS,
    EVAL,
    FIRST_JOB_ID,
    NOTEBOOK_GPU,
    NOTEBOOK_MEM,
    NOTEBOOK_NODE,
    NOTEBOOK_USER,
    STALL_BUSY,
    STALL_LENGTH,
    STALLED,
    SimulatedFleet,
    redis_fault_reader,
)
from devtools.redis_server import EmbeddedRedis
from gpulse.keys import Keys
from gpulse.schema import GPU_METRIC_NAMES, MAX_TEXT, encode, parse, read, read_fast
from gpulse.usage import is_idle_allocated, owner

# name → (memory.total in bytes, power limit in W, max SM clock in MHz), as nvidia-smi shows them.
REAL_SPECS = {
    "NVIDIA H100 80GB HBM3": (81559 * 2**20, 700.0, 1980),
    "NVIDIA A100-SXM4-80GB": (81920 * 2**20, 400.0, 1410),
    "NVIDIA L40S": (46068 * 2**20, 350.0, 2520),
    "NVIDIA RTX 6000 Ada Generation": (49140 * 2**20, 300.0, 2505),
}
HEALTH_READINGS = {
    "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "pcie_replay", "remapped_correctable",
    "remapped_uncorrectable", "remap_pending", "remap_failure", "retired_pages", "retired_pending", "ecc_enabled",
    "ecc_pending", "persistence", "mig_enabled", "mig_pending", "nvlink_links", "nvlink_links_up", "nvlink_errors",
    "vbios", "compute_mode",
}
GPU_FIELDS = {"index", "uuid", "name", "lost", *GPU_METRIC_NAMES, "energy", *ACTIVITY_READINGS, "throttle", "xid",
              "processes", *HEALTH_READINGS}


class FakeClock:
    def __init__(self):
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def fleet_with_clock(nodes=2, gpus=8, seed=11, **kwargs):
    clock = FakeClock()
    return SimulatedFleet(nodes, gpus, 1.0, seed=seed, clock=clock, **kwargs), clock


def advance(fleet, clock, seconds=1.0):
    clock.now += seconds
    return {sample["node"]: sample for sample in fleet.sample()}


def run(fleet, clock, steps):
    return [advance(fleet, clock) for _ in range(steps)]


def test_every_sample_is_a_valid_v1_sample_with_every_field():
    fleet = SimulatedFleet(4, 8, 1.0, seed=3)
    samples = fleet.sample()
    assert [s["node"] for s in samples] == ["sim-01", "sim-02", "sim-03", "sim-04"]
    for sample in samples:
        parsed = parse(encode(sample))
        assert parsed["interval"] == 1.0
        assert set(parsed["host"]) == {"cpu_util", "mem_used", "mem_total"}
        assert parsed["system"] == {"driver": "550.54.15", "cuda": "12.4"}
        assert [port["port"] for port in parsed["ib"]] == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"]
        assert [gpu["index"] for gpu in parsed["gpus"]] == list(range(8))
        for gpu in parsed["gpus"]:
            assert set(gpu) == GPU_FIELDS
            assert gpu["uuid"].startswith("GPU-")


def test_node_names_are_zero_padded_to_the_fleet_size():
    assert SimulatedFleet(12, 1, 1.0, seed=1).node_names[::11] == ["sim-01", "sim-12"]
    assert SimulatedFleet(1000, 1, 1.0, seed=1).node_names[::999] == ["sim-0001", "sim-1000"]
    assert SimulatedFleet(3, 1, 1.0, seed=1, name_prefix="lab-").node_names[0] == "lab-01"


def test_nodes_are_homogeneous_mix_models_and_carry_their_real_specs():
    samples = SimulatedFleet(4, 8, 1.0, seed=5).sample()
    models = set()
    for sample in samples:
        names = {gpu["name"] for gpu in sample["gpus"]}
        assert len(names) == 1, "a node holds one GPU model"
        models |= names
        for gpu in sample["gpus"]:
            mem_total, limit, _ = REAL_SPECS[gpu["name"]]
            assert (gpu["mem_total"], gpu["power_limit"]) == (mem_total, limit)
            sxm = "HBM" in gpu["name"] or "SXM" in gpu["name"]
            # NVLink only on SXM modules; a fan speed only on the actively cooled RTX board.
            assert (gpu["nvlink_tx"] is None) == (not sxm)
            assert (gpu["fan"] is None) == ("RTX" not in gpu["name"])
    assert models == set(REAL_SPECS)


def test_uuids_are_stable_across_restarts_and_unique():
    first = SimulatedFleet(2, 4, 1.0, seed=1).sample()
    again = SimulatedFleet(2, 4, 1.0, seed=99).sample()
    uuids = [gpu["uuid"] for sample in first for gpu in sample["gpus"]]
    assert uuids == [gpu["uuid"] for sample in again for gpu in sample["gpus"]]
    assert len(set(uuids)) == len(uuids)


@pytest.fixture(scope="module")
def hour():
    """One simulated hour of a 4-node fleet, sampled every second."""
    fleet, clock = fleet_with_clock(nodes=4, seed=7)
    return run(fleet, clock, 3600)


def gpu_series(hour, node, index):
    return [step[node]["gpus"][index] for step in hour]


def all_gpus(hour):
    return [gpu for step in hour for sample in step.values() for gpu in sample["gpus"]]


def test_readings_stay_within_the_hardware_limits(hour):
    for gpu in all_gpus(hour):
        assert 0 <= gpu["util"] <= 100 and 0 <= gpu["mem_util"] <= 100
        assert 0 < gpu["power"] <= gpu["power_limit"]
        assert 0 < gpu["mem_used"] <= gpu["mem_total"]
        assert sum(p["mem_used"] for p in gpu["processes"]) <= gpu["mem_used"]
        assert 20 <= gpu["temp"] < 85


def test_idle_gpus_report_gpu_idle_and_busy_ones_run_processes(hour):
    gpus = all_gpus(hour)
    idle = [gpu for gpu in gpus if not gpu["processes"]]
    busy = [gpu for gpu in gpus if gpu["processes"]]
    assert idle and busy
    assert all(gpu["util"] == 0 and "gpu_idle" in gpu["throttle"] for gpu in idle)
    assert all("gpu_idle" not in gpu["throttle"] for gpu in busy)
    assert statistics.mean(gpu["util"] for gpu in busy) > 70
    for gpu in busy:
        (process,) = gpu["processes"]
        assert process["pid"] > 0
        # the GPU's one process: all of its utilization, as nvmlDeviceGetProcessUtilization would tell
        assert (process["sm_util"], process["mem_util"]) == (gpu["util"], gpu["mem_util"])


def test_every_process_carries_its_jobs_user_id_step_and_command(hour):
    seen = {}
    for gpu in all_gpus(hour):
        for process in gpu["processes"]:
            assert process["name"] == process["cmd"].split()[0] in ("python", "jupyter-lab")
            assert process["user"] and process["step"] == "0" and int(process["job"]) >= FIRST_JOB_ID
            assert len(process["cmd"]) <= MAX_TEXT
            identity = (process["user"], process["cmd"])
            assert seen.setdefault(process["job"], identity) == identity, "a job keeps its user and command"
    commands = {cmd for _, cmd in seen.values()}
    assert {cmd.split()[1] for cmd in commands if cmd.startswith("python")} == {"train.py", "eval.py"}
    assert len(seen) > 10


def test_the_forgotten_notebook_sits_at_0_percent_where_the_constants_say_for_the_whole_hour(hour):
    node = f"sim-{NOTEBOOK_NODE + 1:02d}"
    jobs = set()
    for gpu in gpu_series(hour, node, NOTEBOOK_GPU):
        (process,) = gpu["processes"]
        assert process["user"] == NOTEBOOK_USER == "dana" and process["cmd"].startswith("jupyter-lab")
        assert gpu["util"] == 0 and gpu["mem_util"] == 0
        assert process["mem_used"] == NOTEBOOK_MEM and gpu["mem_used"] > NOTEBOOK_MEM
        assert is_idle_allocated(gpu) and owner(gpu) == ("dana", process["job"], "")
        jobs.add(process["job"])
    assert jobs == {str(FIRST_JOB_ID)}, "open since the fleet started"
    assert sum(p["user"] == "dana" for gpu in all_gpus(hour) for p in gpu["processes"]) == len(hour), "nowhere else"


def test_a_node_with_fewer_gpus_holds_the_notebook_on_its_last():
    gpus = SimulatedFleet(1, 4, 1.0, seed=1).sample()[0]["gpus"]
    assert [p["user"] for p in gpus[3]["processes"]] == ["dana"]


def stretches(values: list[bool]) -> list[tuple[bool, int]]:
    """Runs of equal values: (value, length)."""
    return [(value, len(list(run))) for value, run in groupby(values)]


def test_the_stalled_loader_alternates_busy_minutes_with_minutes_near_0_percent(hour):
    stalled = [(int(process["job"]), node, gpu["index"]) for node, sample in hour[0].items()
               for gpu in sample["gpus"] for process in gpu["processes"] if process["cmd"] in STALLED.commands]
    assert stalled, "the fleet starts with a stalled loader"
    _, node, index = min(stalled)  # the one that started with the fleet: it runs for an hour at least
    series = gpu_series(hour, node, index)
    assert series[0]["processes"][0]["job"] == series[-1]["processes"][0]["job"]
    utils = [gpu["util"] for gpu in series][60:]  # past its start-up
    assert all(util <= 2 or util >= 80 for util in utils)
    runs = stretches([util >= 80 for util in utils])[1:-1]  # whole stretches only
    busy = [length for is_busy, length in runs if is_busy]
    stalls = [length for is_busy, length in runs if not is_busy]
    assert len(busy) >= 5 and len(stalls) >= 5
    assert all(STALL_BUSY[0] <= length <= STALL_BUSY[1] + 1 for length in busy)
    assert all(STALL_LENGTH[0] <= length <= STALL_LENGTH[1] + 1 for length in stalls)


def test_eval_jobs_end_within_minutes_at_half_load(hour):
    life: dict[str, list[int]] = {}
    utils: dict[str, list[int]] = {}
    for step, samples in enumerate(hour):
        for sample in samples.values():
            for gpu in sample["gpus"]:
                for process in gpu["processes"]:
                    if process["cmd"] in EVAL.commands:
                        life.setdefault(process["job"], []).append(step)
                        utils.setdefault(process["job"], []).append(gpu["util"])
    finished = [job for job, steps in life.items() if steps[0] > 0 and steps[-1] < len(hour) - 1]
    assert len(finished) >= 3
    for job in finished:
        assert life[job][-1] - life[job][0] <= EVAL.duration[1]
        assert 35 <= statistics.median(utils[job]) <= 75


def test_jobs_start_and_stop_with_memory_steps(hour):
    starts = stops = 0
    for node in hour[0]:
        for index in range(8):
            series = gpu_series(hour, node, index)
            for before, after in pairwise(series):
                if not before["processes"] and after["processes"]:
                    starts += 1
                    assert after["mem_used"] - before["mem_used"] > 5 * 2**30
                if before["processes"] and not after["processes"]:
                    stops += 1
                    assert before["mem_used"] - after["mem_used"] > 5 * 2**30
    assert starts >= 5 and stops >= 5


def test_clocks_drop_under_the_power_cap(hour):
    capped = [gpu for gpu in all_gpus(hour) if "sw_power_cap" in gpu["throttle"]]
    full_speed = [gpu for gpu in all_gpus(hour) if gpu["processes"] and not gpu["throttle"]]
    assert len(capped) > 100 and full_speed
    for gpu in capped:
        assert gpu["sm_clock"] < REAL_SPECS[gpu["name"]][2]
        assert gpu["power"] >= 0.95 * gpu["power_limit"]
    assert all(gpu["sm_clock"] == REAL_SPECS[gpu["name"]][2] for gpu in full_speed)


def test_temperature_follows_power_with_a_thermal_lag(hour):
    jumps = 0
    for node in hour[0]:
        for index in range(8):
            series = gpu_series(hour, node, index)
            # A minute quiet, so the board has cooled: a checkpoint dip is shorter.
            for k in range(60, len(series) - 60):
                quiet_before = all(g["power"] < 0.4 * g["power_limit"] for g in series[k - 60:k])
                busy_after = all(g["power"] > 0.6 * g["power_limit"] for g in series[k:k + 60])
                if quiet_before and busy_after:
                    jumps += 1
                    start = series[k - 1]["temp"]
                    first, later = series[k]["temp"] - start, series[k + 59]["temp"] - start
                    assert later >= 8
                    assert first <= 0.25 * later, "temperature must not jump with power"
    assert jumps >= 3


def test_nvlink_and_pcie_traffic_follow_activity(hour):
    gpus = all_gpus(hour)
    idle = [gpu for gpu in gpus if not gpu["processes"]]
    busy = [gpu for gpu in gpus if gpu["processes"] and gpu["util"] > 80]
    assert max(gpu["pcie_rx"] for gpu in idle) < statistics.median(gpu["pcie_rx"] for gpu in busy)
    assert all(gpu["nvlink_tx"] in (0, None) for gpu in idle)
    assert any(gpu["nvlink_tx"] and gpu["nvlink_tx"] > 1e9 for gpu in busy)


def test_energy_counts_up_by_the_integral_of_power():
    fleet, clock = fleet_with_clock(nodes=2)
    fleet.inject("sim-02", 5, "lost")
    first = advance(fleet, clock)
    start = {(node, gpu["index"]): gpu["energy"] for node, sample in first.items() for gpu in sample["gpus"]}
    assert start[("sim-02", 5)] is None
    del start[("sim-02", 5)]
    # The driver loaded days ago: at least a day at idle power.
    assert all(energy > 86_400 * 25 * 1000 for energy in start.values())
    used = dict.fromkeys(start, 0.0)
    last = dict(start)
    for seconds in [1.0] * 600 + [10.0] * 300:  # 10 min at 1 Hz, then 50 min at 0.1 Hz
        for node, sample in advance(fleet, clock, seconds).items():
            for gpu in sample["gpus"]:
                if (node, gpu["index"]) in start:
                    assert gpu["energy"] >= last[(node, gpu["index"])]
                    last[(node, gpu["index"])] = gpu["energy"]
                    used[(node, gpu["index"])] += gpu["power"] * seconds * 1000  # W × s → mJ
    for gpu, energy in last.items():
        assert energy - start[gpu] == pytest.approx(used[gpu], rel=0.01)


def test_every_sample_takes_the_schema_fast_path_unchanged():
    fleet, clock = fleet_with_clock(nodes=4)
    fleet.inject("sim-02", 1, "lost")
    for step in run(fleet, clock, 300)[::30]:
        for sample in step.values():
            raw = encode(sample)
            assert read_fast(raw) == sample and read(raw) == (sample, 0)


def test_a_hot_gpu_overheats_and_throttles_then_cools_when_cleared():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-01", 3, "hot")
    for step in range(60):  # noqa: B007 - read after the loop, in the failure message
        gpus = advance(fleet, clock)["sim-01"]["gpus"]
        if gpus[3]["temp"] >= 91:
            break
    assert gpus[3]["temp"] >= 91, f"still {gpus[3]['temp']} °C after {step + 1} s"
    assert {"sw_thermal_slowdown", "hw_thermal_slowdown"} <= set(gpus[3]["throttle"])
    assert all(gpu["temp"] < 85 for gpu in gpus if gpu["index"] != 3)
    if gpus[3]["processes"]:
        assert gpus[3]["sm_clock"] < 0.7 * REAL_SPECS[gpus[3]["name"]][2]
    for _ in range(60):
        assert advance(fleet, clock)["sim-01"]["gpus"][3]["temp"] <= 96

    fleet.inject("sim-01", 3, "clear")
    for _ in range(120):
        gpu = advance(fleet, clock)["sim-01"]["gpus"][3]
        if gpu["temp"] < 80:
            break
    assert gpu["temp"] < 80
    assert not {"sw_thermal_slowdown", "hw_thermal_slowdown"} & set(gpu["throttle"])


def test_xid_is_reported_while_set():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-02", 0, "xid")
    fleet.inject("sim-01", None, "xid:79")
    for _ in range(2):
        samples = advance(fleet, clock)
        assert [gpu["xid"] for gpu in samples["sim-02"]["gpus"]] == [[48]] + [[]] * 7
        assert all(gpu["xid"] == [79] for gpu in samples["sim-01"]["gpus"])
    fleet.inject("sim-02", 0, "clear")
    assert advance(fleet, clock)["sim-02"]["gpus"][0]["xid"] == []


def test_ecc_errors_count_up_while_set_and_reset_when_cleared():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-01", 1, "ecc")
    counts = [advance(fleet, clock)["sim-01"]["gpus"][1]["ecc_uncorrected"] for _ in range(120)]
    assert counts[0] == 1
    assert counts == sorted(counts) and counts[-1] > 3
    assert advance(fleet, clock)["sim-01"]["gpus"][0]["ecc_uncorrected"] == 0
    fleet.inject("sim-01", 1, "clear")
    assert advance(fleet, clock)["sim-01"]["gpus"][1]["ecc_uncorrected"] == 0


def test_a_lost_gpu_stays_listed_with_nulls_and_its_job_dies():
    fleet, clock = fleet_with_clock(seed=2)
    before = advance(fleet, clock)["sim-01"]["gpus"]
    fleet.inject("sim-01", 2, "lost")
    gpus = advance(fleet, clock)["sim-01"]["gpus"]
    assert len(gpus) == 8
    lost = gpus[2]
    assert lost["lost"] is True and lost["index"] == 2 and lost["uuid"] == before[2]["uuid"]
    assert all(lost[field] is None for field in GPU_FIELDS - {"index", "uuid", "name", "lost"})
    assert all(gpu["lost"] is False and gpu["temp"] is not None for gpu in gpus if gpu["index"] != 2)
    parse(encode(advance(fleet, clock)["sim-01"]))

    fleet.inject("sim-01", 2, "clear")
    back = advance(fleet, clock)["sim-01"]["gpus"][2]
    assert back["lost"] is False and back["processes"] == [] and back["util"] == 0


def test_a_dead_node_stops_reporting_until_cleared():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-02", None, "dead")
    assert list(advance(fleet, clock)) == ["sim-01"]
    fleet.inject("sim-02", None, "clear")
    assert list(advance(fleet, clock)) == ["sim-01", "sim-02"]


def test_clearing_a_node_clears_its_gpus_too():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-01", 4, "lost")
    fleet.inject("sim-01", 5, "xid")
    fleet.inject("sim-02", 1, "lost")
    fleet.inject("sim-01", None, "clear")
    samples = advance(fleet, clock)
    assert not any(gpu["lost"] or gpu["xid"] for gpu in samples["sim-01"]["gpus"])
    assert samples["sim-02"]["gpus"][1]["lost"] is True


@pytest.mark.parametrize("node, gpu, fault, message", [
    ("sim-09", None, "hot", "no node 'sim-09'"),
    ("sim-01", 8, "hot", "GPUs 0..7"),
    ("sim-01", 0, "melt", "unknown fault 'melt'"),
    ("sim-01", 0, "xid:abc", "Xid code"),
])
def test_inject_refuses_what_the_fleet_cannot_do(node, gpu, fault, message):
    fleet, _ = fleet_with_clock()
    with pytest.raises(ValueError, match=message):
        fleet.inject(node, gpu, fault)


def test_faults_come_from_the_redis_hash(redis_client, caplog):
    key = Keys().simulator_faults
    redis_client.hset(key, mapping={
        "sim-01/2": "lost", "sim-02": "dead", "sim-01/5": "xid:79",
        "sim-01/9": "hot", "sim-01/1": "melt", "other-07": "dead",
    })
    fleet, clock = fleet_with_clock(fault_reader=redis_fault_reader(redis_client, Keys()))
    with caplog.at_level(logging.WARNING, logger="collectors.simulated"):
        samples = advance(fleet, clock)
        advance(fleet, clock)
    assert list(samples) == ["sim-01"]
    gpus = samples["sim-01"]["gpus"]
    assert gpus[2]["lost"] is True and gpus[5]["xid"] == [79] and gpus[1]["lost"] is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, "each bad entry is logged once, not per sample"
    assert any("sim-01/9" in w for w in warnings) and any("melt" in w for w in warnings)

    redis_client.hdel(key, "sim-02", "sim-01/2")
    samples = advance(fleet, clock)
    assert list(samples) == ["sim-01", "sim-02"]
    assert samples["sim-01"]["gpus"][2]["lost"] is False


def test_a_fault_from_redis_wins_over_an_injected_one(redis_client):
    redis_client.hset(Keys().simulator_faults, "sim-01/0", "clear")
    fleet, clock = fleet_with_clock(fault_reader=redis_fault_reader(redis_client, Keys()))
    fleet.inject("sim-01", 0, "lost")
    fleet.inject("sim-01", 1, "lost")
    gpus = advance(fleet, clock)["sim-01"]["gpus"]
    assert gpus[0]["lost"] is False and gpus[1]["lost"] is True


def test_sampling_keeps_the_last_faults_while_redis_is_away(caplog):
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url, socket_connect_timeout=1, socket_timeout=1)
        client.hset(Keys().simulator_faults, "sim-01/0", "lost")
        fleet, clock = fleet_with_clock(fault_reader=redis_fault_reader(client, Keys()))
        assert advance(fleet, clock)["sim-01"]["gpus"][0]["lost"] is True
        server.stop()
        with caplog.at_level(logging.WARNING, logger="collectors.simulated"):
            for _ in range(3):
                assert advance(fleet, clock)["sim-01"]["gpus"][0]["lost"] is True
        assert len([r for r in caplog.records if "keeping the last known" in r.getMessage()]) == 1
    finally:
        server.stop()


def test_a_thousand_nodes_of_eight_gpus_sample_well_inside_a_second():
    fleet = SimulatedFleet(1000, 8, 1.0, seed=1)
    fleet.sample()
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        samples = fleet.sample()
        timings.append(time.perf_counter() - started)
    assert len(samples) == 1000 and sum(len(s["gpus"]) for s in samples) == 8000
    # Typically 25-50 ms on a 2-core host; the bound leaves room for a busy CI machine.
    assert statistics.median(timings) < 0.25


def test_healthy_gpus_report_every_health_reading_their_model_has():
    samples = {s["node"]: s for s in SimulatedFleet(4, 8, 1.0, seed=3).sample()}
    h100, l40s = samples["sim-01"]["gpus"][0], samples["sim-03"]["gpus"][0]
    assert h100["name"] == "NVIDIA H100 80GB HBM3"
    assert (h100["pcie_gen"], h100["pcie_gen_max"], h100["pcie_width"], h100["pcie_width_max"]) == (5, 5, 16, 16)
    assert (h100["nvlink_links"], h100["nvlink_links_up"], h100["nvlink_errors"]) == (18, 18, 0)
    assert h100["persistence"] is True and h100["ecc_enabled"] is True and h100["remap_pending"] is False
    assert h100["remapped_uncorrectable"] == 0 and h100["vbios"] and h100["compute_mode"] == "Default"
    assert (l40s["nvlink_links"], l40s["nvlink_errors"]) == (0, None), "an L40S has no NVLink"


def test_a_healthy_fleet_passes_every_health_check():
    fleet, clock = fleet_with_clock(nodes=4)
    checks = HealthChecks()
    for _ in range(3):
        for entry in advance(fleet, clock).values():
            checks.annotate(entry, clock.now)
            assert entry["health"]["findings"] == []


@pytest.mark.parametrize("fault, gpu, finding", [
    ("pcie_degraded", 2, ("pcie_link", 2, "fail", "x8 of x16 lanes, Gen5 of Gen5")),
    ("row_remap_pending", 2, ("row_remap", 2, "warn",
                              "a row remap waits for a GPU reset "
                              "(rows remapped: 1 for uncorrectable errors, 0 for correctable)")),
    ("nvlink_down", 2, ("nvlink_state", 2, "fail", "1 of 18 links down, 17 up")),
    ("gpu_missing", 2, ("gpu_count", 2, "fail", "GPU 2 missing: 7 of 8 on the bus")),
    ("ib_down", None, ("ib_port", None, "fail", "mlx5_3/1 DOWN/Polling")),
])
def test_each_health_fault_gives_its_finding_on_that_node_and_clearing_returns_it_to_healthy(fault, gpu, finding):
    fleet, clock = fleet_with_clock()
    checks = HealthChecks()

    def health_findings() -> dict[str, list[tuple]]:
        samples = advance(fleet, clock)
        for entry in samples.values():
            checks.annotate(entry, clock.now)
            parse(encode(entry))
        return {node: [(f["check"], f["gpu"], f["status"], f["reason"]) for f in entry["health"]["findings"]]
                for node, entry in samples.items()}

    assert health_findings() == {"sim-01": [], "sim-02": []}
    fleet.inject("sim-01", gpu, fault)
    assert health_findings() == {"sim-01": [finding], "sim-02": []}
    fleet.inject("sim-01", gpu, "clear")
    assert health_findings() == {"sim-01": [], "sim-02": []}


def test_a_missing_gpu_vanishes_from_the_list_and_its_job_dies():
    fleet, clock = fleet_with_clock(seed=2)
    advance(fleet, clock)
    fleet.inject("sim-01", 2, "gpu_missing")
    gpus = advance(fleet, clock)["sim-01"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 3, 4, 5, 6, 7]
    for _ in range(200):
        advance(fleet, clock)
    fleet.inject("sim-01", 2, "clear")
    back = advance(fleet, clock)["sim-01"]["gpus"][2]
    assert back["index"] == 2 and back["processes"] == [] and back["util"] == 0, "no job ran on the missing GPU"


def test_driver_skew_changes_that_nodes_driver_until_cleared():
    fleet, clock = fleet_with_clock()
    fleet.inject("sim-02", None, "driver_skew")
    samples = advance(fleet, clock)
    assert samples["sim-01"]["system"]["driver"] == "550.54.15"
    assert samples["sim-02"]["system"]["driver"] != "550.54.15"
    fleet.inject("sim-02", None, "clear")
    assert advance(fleet, clock)["sim-02"]["system"]["driver"] == "550.54.15"


def test_health_checks_of_a_thousand_nodes_take_a_fraction_of_sampling():
    fleet = SimulatedFleet(1000, 8, 1.0, seed=1)
    checks = HealthChecks()
    now = 1_800_000_000.0
    timings = []
    for step in range(5):
        samples = fleet.sample()
        started = time.perf_counter()
        for entry in samples:
            checks.annotate(entry, now + step)
        timings.append(time.perf_counter() - started)
    # Typically ~30 ms on a 2-core host; the bound leaves room for a busy CI machine.
    assert statistics.median(timings) < 0.25
