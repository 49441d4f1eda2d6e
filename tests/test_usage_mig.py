"""Usage accounting of GPUs in MIG mode: each instance a fraction of its GPU, owned by whoever runs on it
(issue 36), through ingest into the database, the API, the CSV, the page and the idle list."""

import csv
import io
import random
import time
from collections import defaultdict

import orjson
import pytest

from collectors.simulated import SimulatedFleet
from dashboard.live.models import ClusterUsage, GpuUsage, UsageHour
from dashboard.usage.models import GpuPrice
from dashboard.usage.stage import IdleStage
from gpulse import schema
from gpulse.keys import Keys
from gpulse.usage import is_allocated, is_busy, mig_instance, mig_slices, mig_split, owner
from tests.ingest_stages import stage_of
from tests.samples import gpu, sample
from tests.test_collector_simulated import FakeClock, advance
from tests.test_ingest import apply, frames, make_ingest  # noqa: F401 (fixtures)
from tests.test_usage_accounting import A100, H100, accumulator, process
from tests.test_usage_pages import Tables

pytestmark = pytest.mark.django_db

MINUTE = 1_700_000_040.0


def instance(gpu_instance: int, profile: str, processes=(), sm_active: float | None = None, **more) -> dict:
    return {"gpu_instance": gpu_instance, "compute_instance": 0, "profile": profile,
            "uuid": f"MIG-{gpu_instance:08d}", "mem_used": 13 * 2**20, "mem_total": 9984 * 2**20,
            "sm_active": sm_active, "processes": list(processes), **more}


def mig_gpu(index: int, instances: list, power: float = 350.0, model: str = H100, **more) -> dict:
    """A GPU in MIG mode as the nvml source reports it: no utilization, its instances' processes."""
    return gpu(index, util=None, power=power, name=model, mig_enabled=True, mig=instances,
               processes=[p for i in instances for p in i["processes"]], **more)


def mig_sample(node: str, ts: float, gpus: list, interval: float = 1.0) -> dict:
    s = sample(node, gpus=0, ts=ts, interval=interval)
    s["gpus"] = gpus
    assert schema.validate(s) == 0, "a sample of the contract"
    return s


def two_users(sm_alice: float = 0.8, sm_bob: float = 0.02) -> list:
    """A 3g.40gb instance running alice's job and a 2g.20gb running bob's; 2 of the 7 slices unmade."""
    return [instance(1, "3g.40gb", [process("alice", "100")], sm_active=sm_alice),
            instance(5, "2g.20gb", [process("bob", "200")], sm_active=sm_bob)]


def by_instance(node: str = "n1") -> dict:
    return {(row.gpu, row.mig_instance, row.user): row for row in GpuUsage.objects.filter(node=node)}


def test_each_instance_counts_its_share_for_its_owner_busy_by_its_own_sm_activity(make_ingest):  # noqa: F811
    ingest = make_ingest()
    for second in range(60):
        apply(ingest, mig_sample("n1", MINUTE + second, [mig_gpu(0, two_users(), power=350.0)]))
    ingest.flush()
    rows = by_instance()
    assert set(rows) == {(0, "1/0", "alice"), (0, "5/0", "bob"), (0, "", "")}
    alice, bob, unmade = rows[(0, "1/0", "alice")], rows[(0, "5/0", "bob")], rows[(0, "", "")]
    assert (alice.mig_profile, bob.mig_profile, unmade.mig_profile) == ("3g.40gb", "2g.20gb", "")
    assert (alice.samples, alice.seconds, alice.allocated_seconds) == (60, pytest.approx(60 * 3 / 7),
                                                                        pytest.approx(60 * 3 / 7))
    assert alice.busy_seconds == pytest.approx(60 * 3 / 7), "80 % of its SMs active: busy"
    assert (bob.allocated_seconds, bob.busy_seconds) == (pytest.approx(60 * 2 / 7), 0.0), "2 %: idle"
    assert alice.sm_activity_seconds == pytest.approx(alice.allocated_seconds)
    # The slices no instance holds: free, never allocated, whatever processes the GPU itself lists.
    assert (unmade.seconds, unmade.allocated_seconds) == (pytest.approx(60 * 2 / 7), 0.0)
    # Energy (power x interval here) split by the same shares: the board's 350 W x 60 s, once.
    assert [alice.energy_j, bob.energy_j, unmade.energy_j] == pytest.approx([9000.0, 6000.0, 6000.0])
    hours = {(h.user, h.mig_profile): h for h in UsageHour.objects.all()}
    assert hours[("alice", "3g.40gb")].allocated_seconds == pytest.approx(60 * 3 / 7)
    assert hours[("alice", "3g.40gb")].model == H100


def test_the_gpu_in_mig_mode_is_counted_once_its_rows_adding_up_to_one_gpu(make_ingest):  # noqa: F811
    """The parent's processes are its instances': no row for the GPU's own owner, and a GPU-minute
    of seconds and the board's energy in all, beside a whole GPU counted as before."""
    ingest = make_ingest()
    for second in range(60):
        apply(ingest, mig_sample("n1", MINUTE + second, [
            mig_gpu(0, two_users(), energy=1_000_000 + 350_000 * second),
            gpu(1, util=95, processes=[process("carol", "300")], power=500.0),
        ]))
    ingest.flush()
    mig_rows = GpuUsage.objects.filter(gpu=0)
    assert sum(row.seconds for row in mig_rows) == pytest.approx(60.0)
    assert sum(row.energy_j for row in mig_rows) == pytest.approx(350.0 + 59 * 350.0)
    assert sum(row.allocated_seconds for row in mig_rows) == pytest.approx(60 * 5 / 7)
    assert not mig_rows.filter(mig_instance="").exclude(user="").exists()
    cluster = ClusterUsage.objects.get()
    assert cluster.seconds == pytest.approx(120.0)
    assert cluster.allocated_seconds == pytest.approx(60 * 5 / 7 + 60.0)


def test_a_gpu_in_mig_mode_with_no_instance_made_counts_as_a_free_gpu(make_ingest):  # noqa: F811
    ingest = make_ingest()
    for second in range(60):
        apply(ingest, mig_sample("n1", MINUTE + second, [mig_gpu(0, [], power=80.0)]))
    ingest.flush()
    row = GpuUsage.objects.get()
    assert (row.mig_instance, row.mig_profile, row.user) == ("", "", "")
    assert (row.samples, row.seconds, row.allocated_seconds, row.energy_j) == (60, 60.0, 0.0,
                                                                               pytest.approx(80.0 * 60))


def test_an_instance_that_changes_hands_within_a_minute_has_a_row_per_owner(make_ingest):  # noqa: F811
    ingest = make_ingest()
    for second in range(60):
        user, job = ("alice", "100") if second < 20 else ("dana", "400")
        apply(ingest, mig_sample("n1", MINUTE + second, [mig_gpu(0, [
            instance(7, "1g.10gb", [process(user, job)], sm_active=0.5),
            instance(8, "1g.10gb", sm_active=0.0),  # free
        ] + [instance(gi, "1g.10gb", sm_active=0.0) for gi in range(9, 14)])]))
    ingest.flush()
    rows = by_instance()
    assert rows[(0, "7/0", "alice")].allocated_seconds == pytest.approx(20 / 7)
    assert rows[(0, "7/0", "dana")].allocated_seconds == pytest.approx(40 / 7)
    assert rows[(0, "8/0", "")].allocated_seconds == 0.0
    # Seven 1g instances hold all 7 slices: no row for the GPU's free slices.
    assert (0, "", "") not in rows
    assert sum(row.seconds for row in rows.values()) == pytest.approx(60.0)


def test_an_instance_held_by_a_pod_alone_is_allocated_to_the_pod(make_ingest):  # noqa: F811
    ingest = make_ingest()
    held = instance(2, "3g.40gb", sm_active=0.3, k8s={"pod": "nb-0", "namespace": "ml", "container": None})
    apply(ingest, mig_sample("n1", MINUTE, [mig_gpu(0, [held])]))
    ingest.flush()
    row = GpuUsage.objects.get(mig_instance="2/0")
    assert (row.pod, row.allocated_seconds, row.busy_seconds) == ("ml/nb-0", pytest.approx(3 / 7),
                                                                  pytest.approx(3 / 7))


@pytest.mark.parametrize("model, profiles, shares", [
    (H100, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], [3 / 7, 2 / 7, 1 / 7, 1 / 7]),
    (A100, ["1c.3g.40gb", "2c.3g.40gb"], [1 / 7, 2 / 7]),  # compute instances of one GPU instance
    ("NVIDIA A30", ["2g.12gb", "1g.6gb+me"], [2 / 4, 1 / 4]),  # the A30 has 4 slices
    (H100, [None, "7g.80gb"], [1 / 8, 7 / 8]),  # a profile that does not say: a slice; never more than one GPU
    ("Acme Tensor 9", ["8g.96gb", "4g.48gb"], [8 / 12, 4 / 12]),  # a model of more slices than known
])
def test_an_instances_share_is_its_slices_over_its_gpus(model, profiles, shares):
    instances = [{"gpu_instance": i, "profile": profile} for i, profile in enumerate(profiles)]
    split, free = mig_split(model, instances)
    assert split == pytest.approx(shares)
    assert free == pytest.approx(1 - sum(shares)) and free >= 0
    assert mig_slices("1g.10gb+me") == 1 and mig_slices("bogus") is None


# -- the API, the CSV and the page --------------------------------------------------------------------------------

@pytest.fixture
def mig_hour(make_ingest):  # noqa: F811
    """An hour of a node with a MIG GPU (alice's 3g busy, bob's 2g idle) and a whole GPU of carol's, every 30 s."""
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 2) * 3600
    for step in range(120):
        apply(ingest, mig_sample("n1", start + 30 * step, [
            mig_gpu(0, two_users()), gpu(1, util=95, processes=[process("carol", "300")], power=500.0),
        ], interval=30.0))
    ingest.flush()
    GpuPrice.objects.create(gpu_model=H100, usd_per_gpu_hour="7.00")
    return start


@pytest.mark.parametrize("by", ["user", "job", "node"])
def test_the_api_and_csv_give_mig_rows_their_profile_and_fraction(viewer, mig_hour, by):
    query = f"since={mig_hour}&until={mig_hour + 3600}"
    answer = viewer.get(f"/api/v1/usage?by={by}&{query}").json()
    rows = {(row[by], row["mig_profile"]): row for row in answer["rows"]}
    if by == "node":
        assert set(rows) == {("n1", "3g.40gb"), ("n1", "2g.20gb"), ("n1", "")}
        assert rows[("n1", "")]["gpu_hours"] == pytest.approx(1.0)  # carol's whole GPU; the unmade slices: free
        assert rows[("n1", "")]["allocated_pct"] == pytest.approx(100 * 1 / (1 + 2 / 7))
    else:
        owner_of = {"user": ("alice", "bob", "carol"), "job": ("100", "200", "300")}[by]
        assert set(rows) == {(owner_of[0], "3g.40gb"), (owner_of[1], "2g.20gb"), (owner_of[2], "")}
        alice, bob = rows[(owner_of[0], "3g.40gb")], rows[(owner_of[1], "2g.20gb")]
        assert [alice["gpu_hours"], alice["cost"], alice["busy_pct"]] == pytest.approx([3 / 7, 3.0, 100.0])
        assert (bob["idle_gpu_hours"], bob["busy_by"]) == (pytest.approx(2 / 7), "sm_activity")
    assert answer["totals"]["gpu_hours"] == pytest.approx(1 + 5 / 7)  # never more than the GPUs there were
    csv_rows = list(csv.DictReader(io.StringIO(viewer.get(f"/usage/{by}.csv?{query}").content.decode())))
    assert [(line[by], line["mig_profile"], float(line["gpu_hours"])) for line in csv_rows] == [
        (row[by], row["mig_profile"], row["gpu_hours"]) for row in answer["rows"]]


def test_the_page_shows_a_mig_column_only_where_a_row_is_an_instances(viewer, mig_hour):
    html = viewer.get(f"/usage/?since={mig_hour}&until={mig_hour + 3600}").content.decode()
    tables = Tables(html).tables
    assert tables["usage-user"]["head"][0][:2] == ["User", "MIG profile"]
    by_user = {row[0]: row[1] for row in tables["usage-user"]["body"]}
    assert by_user == {"alice": "3g.40gb", "bob": "2g.20gb", "carol": "whole GPU"}
    assert tables["usage-user"]["foot"][0][0] == "Total" and len(tables["usage-user"]["foot"][0]) == 9


def test_a_page_without_mig_has_no_mig_column(viewer, make_ingest):  # noqa: F811
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 2) * 3600
    apply(ingest, mig_sample("n1", start, [gpu(0, processes=[process("carol", "300")])], interval=30.0))
    ingest.flush()
    html = viewer.get(f"/usage/?since={start}&until={start + 3600}").content.decode()
    assert "MIG profile" not in html
    assert Tables(html).tables["usage-user"]["body"][0][0] == "carol"


# -- idle now ------------------------------------------------------------------------------------------------------

def test_the_idle_list_names_an_idle_instance_its_owner_and_profile(redis_client, make_ingest, viewer,  # noqa: F811
                                                                    settings):
    settings.GPULSE_IDLE_MIN_SECONDS = 60
    GpuPrice.objects.create(gpu_model=H100, usd_per_gpu_hour="7.00")
    ingest = make_ingest()
    now = time.time()
    for second in (-90, -60, -30, 0):
        apply(ingest, mig_sample("n1", now + second, [mig_gpu(0, two_users() + [
            instance(13, "1g.10gb", [process("erin", "500")], sm_active=None),  # no SM activity: no verdict
        ])]))
    ingest.emit(now)
    listed = orjson.loads(redis_client.get(Keys().idle_allocations))
    assert [(e["node"], e["gpu"], e["mig_instance"], e["mig_profile"], e["user"], e["job"]) for e in listed] == [
        ("n1", 0, "5/0", "2g.20gb", "bob", "200")]
    assert listed[0]["share"] == pytest.approx(2 / 7) and listed[0]["since"] == pytest.approx(now - 90)
    idle_now = viewer.get("/api/v1/usage?by=user&since=1h").json()["idle_now"]
    assert idle_now[0]["usd_per_hour"] == pytest.approx(2.0)  # 2/7 of $7
    ingest.use_database(now)
    summary = stage_of(ingest, IdleStage).summary()["idle_allocated"]
    assert (summary["gpus"], summary["usd_per_hour"]) == (0.29, pytest.approx(2.0))
    html = viewer.get("/usage/?since=1h").content.decode()
    assert Tables(html).tables["idle-table"]["body"][0][:3] == ["n1", "0 MIG 2g.20gb", "bob"]


def test_a_restarted_ingest_keeps_how_long_an_instance_has_been_idle(redis_client, make_ingest):  # noqa: F811
    now = time.time()
    ingest = make_ingest()
    apply(ingest, mig_sample("n1", now - 600, [mig_gpu(0, two_users())]))
    ingest.emit(now - 600)
    again = make_ingest()
    again.load_known_nodes()
    apply(again, mig_sample("n1", now, [mig_gpu(0, two_users())]))
    again.emit(now)
    listed = orjson.loads(redis_client.get(Keys().idle_allocations))
    assert [(e["mig_instance"], e["since"]) for e in listed] == [("5/0", pytest.approx(now - 600))]


def test_ingests_mig_accounting_agrees_with_gpulse_usage():
    """Random MIG GPUs, every shape an instance takes (free, a process, several, a pod, no SM activity, no
    profile), over a few readings that change owners: each instance's rows as gpulse.usage defines them."""
    rng = random.Random(36)
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "1c.3g.40gb", None]
    rollups = accumulator()
    expected: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # key -> seconds, allocated, busy
    for second in range(5):
        gpus = []
        for index in range(40):
            instances = []
            for gpu_instance in rng.sample(range(1, 15), rng.choice([0, 1, 2, 4])):
                held = [process(rng.choice(["alice", "bob", None]), rng.choice(["1", "2"]),
                                mem=rng.choice([2**30, 2**34])) for _ in range(rng.choice([0, 1, 1, 2]))]
                more = {"k8s": {"pod": "nb-0", "namespace": "ml", "container": None}} if rng.random() < 0.1 else {}
                instances.append(instance(gpu_instance, rng.choice(profiles), held,
                                          sm_active=rng.choice([None, 0.05, 0.5]), **more))
            gpus.append(mig_gpu(index, instances))
            shares, free = mig_split(H100, instances)
            for inst, share in zip(instances, shares, strict=True):
                allocated = is_allocated(inst)
                who = tuple(owner(inst)) if allocated else ("", "", "")
                sums = expected[(index, mig_instance(inst), *who)]
                sums[0] += share
                sums[1] += share if allocated else 0.0
                sums[2] += share if allocated and is_busy(inst) else 0.0
            if free:
                expected[(index, "", "", "", "")][0] += free
        rollups.add(mig_sample("n1", MINUTE + second, gpus))
    rollups.fold_queued()
    rows = rollups.usage_rows()[0]
    counted = {(row[1], row[13], *row[3:6]): [row[8], row[9], row[10]] for row in rows}
    assert counted.keys() == {key for key, sums in expected.items() if sums[0]}
    for key, sums in counted.items():
        assert sums == pytest.approx(expected[key]), key
    for index in range(40):
        assert sum(sums[0] for key, sums in counted.items() if key[0] == index) == pytest.approx(5.0)


def test_the_simulated_mig_nodes_instances_are_accounted_with_their_owners(make_ingest):  # noqa: F811
    """The demo's MIG node (collectors/simulated.py) through ingest: each instance's rows name the user of the
    job on it, and each GPU's rows add up to its seconds."""
    clock = FakeClock()
    fleet = SimulatedFleet(3, 8, 1.0, seed=5, clock=clock, mig_node="sim-03")
    clock.now = (clock.now // 60 + 1) * 60  # a minute of its own
    ingest = make_ingest()
    held = set()
    for _ in range(60):
        s = advance(fleet, clock)["sim-03"]
        apply(ingest, s)
        held |= {(gpu["index"], mig_instance(instance), instance["profile"], tuple(owner(instance)))
                 for gpu in s["gpus"] for instance in gpu["mig"] if is_allocated(instance)}
    ingest.flush()
    rows = GpuUsage.objects.filter(node="sim-03")
    assert held and {(r.gpu, r.mig_instance, r.mig_profile, (r.user, r.job, r.pod)) for r in rows
                     if r.allocated_seconds} == held
    for index in range(8):
        assert sum(r.seconds for r in rows if r.gpu == index) == pytest.approx(60.0)
