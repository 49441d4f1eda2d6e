"""Fabric sweeps and bisections feed node health (the check ``fabric``) and, through it, incidents (issue 38)."""

import datetime as dt
import itertools

import pytest

from dashboard.benchmarks import diagnostics_stage
from dashboard.benchmarks.diagnostics import NodeDiagnosis, apply, diagnose
from dashboard.benchmarks.diagnostics_stage import FabricDiagnosticsStage
from dashboard.benchmarks.fabric import pairs_result
from dashboard.benchmarks.models import FabricSweep
from dashboard.health.node_health import NodeHealthBook
from dashboard.health.stage import HealthStage
from dashboard.live.ingest import Ingest
from dashboard.reliability.models import Incident
from dashboard.reliability.stage import IncidentStage
from dashboard.reliability.tracker import HEALED_AFTER
from gpulse import health
from tests.clock import Clock
from tests.test_fabric_sweep import bisect_until_done
from tests.test_node_health import NVLINK_DOWN, up, with_health

NODES = ["a", "b", "c", "d", "e", "f", "g", "h"]
FAIL, WARN = ("fabric", None, health.FAIL), ("fabric", None, health.WARN)


def links(slow_node: str | None = None, bad_cable: tuple[str, str] | None = None) -> dict:
    measured = {pair: 10.0 for pair in itertools.combinations(NODES, 2)}
    for pair in measured:
        if slow_node in pair:
            measured[pair] = 2.0
    if bad_cable is not None:
        measured[bad_cable] = 3.0
    return measured


def test_a_slow_node_fails_naming_its_median_and_a_bad_cable_warns_both_ends_and_the_rest_pass():
    result = pairs_result(links(slow_node="c", bad_cable=("a", "b")), {}, 0.7)
    diagnosed = diagnose(7, FabricSweep.PAIRS, result, 0.7)
    assert diagnosed["c"] == {FAIL: "fabric sweep 7: the median of its links 2.0 GB/s is 20% of all links' "
                                    "10.0 GB/s, below 70%"}
    # a and b: their cable; their slow links to c are c's, not theirs.
    assert diagnosed["a"] == {WARN: "fabric sweep 7: link to b 3.0 GB/s (30%) of the median 10.0 GB/s, below 70%"}
    assert diagnosed["b"] == {WARN: "fabric sweep 7: link to a 3.0 GB/s (30%) of the median 10.0 GB/s, below 70%"}
    assert all(diagnosed[node] == {} for node in "defgh")


def test_a_node_whose_pairs_all_failed_was_not_measured_and_a_sweep_without_links_decides_nothing():
    measured = {pair: 10.0 for pair in itertools.combinations(NODES[:4], 2)}
    failed = {(node, "e"): "node e has no worker" for node in NODES[:4]}
    diagnosed = diagnose(8, FabricSweep.PAIRS, pairs_result(measured, failed, 0.7), 0.7)
    assert diagnosed == {node: {} for node in "abcd"}
    assert diagnose(9, FabricSweep.PAIRS, pairs_result({}, failed, 0.7), 0.7) == {}
    assert diagnose(10, FabricSweep.PAIRS, None, 0.7) == {}


def test_a_bisection_fails_its_suspects_and_passes_the_nodes_it_found_good():
    nodes = [f"n{i}" for i in range(1, 9)]
    _, state = bisect_until_done(nodes, lambda group: 1.0 if "n6" in group else 10.0)
    diagnosed = diagnose(3, FabricSweep.BISECT, {**state, "slow_nodes": state["suspects"]}, 0.7)
    assert diagnosed["n6"] == {FAIL: f"bisection 3: {state['conclusion']}"}
    # The first half was found good, then n7 and n8's half, then n5 paired well.
    assert {node for node, findings in diagnosed.items() if findings == {}} == {"n1", "n2", "n3", "n4", "n5",
                                                                                   "n7", "n8"}
    _, healthy = bisect_until_done(nodes, lambda group: 10.0)
    assert diagnose(4, FabricSweep.BISECT, {**healthy, "slow_nodes": []}, 0.7) == {}  # nothing of one node


def test_the_newest_diagnostic_of_a_node_decides_whatever_order_they_are_read_in():
    book: dict[str, NodeDiagnosis] = {}
    assert apply(book, 200.0, {"c": {FAIL: "slow"}, "d": {}}) == {"c", "d"}
    assert apply(book, 100.0, {"c": {}, "e": {}}) == {"e"}  # older for c: c stays failing
    assert book["c"].findings == {FAIL: "slow"}
    assert apply(book, 300.0, {"c": {}}) == {"c"}
    assert apply(book, 300.0, {"c": {}}) == set()


def test_health_judges_a_fabric_finding_with_the_nodes_own_and_a_pass_clears_it():
    book = NodeHealthBook()
    for name in ("a", "b"):
        book.update(name, with_health(name))
    book.tick(100.0, up("a", "b"), [])
    book.diagnose({"a": {FAIL: "fabric sweep 7: slow"}, "b": {}})
    assert sorted(book.tick(101.0, up("a", "b"), [])) == ["a", "b"]  # b: one more check passed
    node = book.nodes["a"]
    assert node.verdict == health.FAILING and "fabric" in node.checked
    assert node.summary()["reason"] == "Fabric bandwidth: fabric sweep 7: slow"
    assert node.summary()["action"] == health.BY_ID["fabric"].fail_action
    assert book.nodes["b"].verdict == health.HEALTHY and "fabric" in book.nodes["b"].checked

    # The node's own findings still count beside it; a pass leaves only those.
    book.update("a", with_health("a", NVLINK_DOWN))
    book.diagnose({"a": {}, "b": {}})
    book.tick(102.0, up("a", "b"), [])
    assert [key[0] for key in book.nodes["a"].findings] == ["nvlink_state"]
    book.update("a", with_health("a"))
    book.tick(103.0, up("a", "b"), [])
    assert book.nodes["a"].verdict == health.HEALTHY
    # A down node has no verdict, whatever a sweep said.
    book.diagnose({"a": {FAIL: "fabric sweep 8: slow"}})
    book.tick(104.0, up("a", status="down"), ["a"])
    assert book.nodes["a"].verdict == health.NO_VERDICT


# --- the stage, on the database and a real Redis ---

START = 1_800_000_000.0


def finished_sweep(result: dict, when: dt.datetime, kind: str = FabricSweep.PAIRS) -> FabricSweep:
    return FabricSweep.objects.create(status="succeeded", kind=kind, nodes=NODES, rounds=[], size_bytes=1 << 26,
                                      finished=when, result=result)


def run(ingest, clock, seconds: int) -> None:
    for _ in range(seconds):
        for name in NODES:
            entry_id = f"{int(clock.now * 1000)}-{NODES.index(name)}".encode()
            ingest.apply({**with_health(name), "ts": clock.now}, entry_id)
        ingest.emit(clock.now)
        clock.now += 1


@pytest.fixture
def make_ingest(redis_client, monkeypatch):
    monkeypatch.setattr(diagnostics_stage, "READ_EVERY", 0.0)  # every tick, not every 10 s of wall time
    clock = Clock(START)

    def make() -> tuple[Ingest, Clock]:
        stages = [HealthStage, FabricDiagnosticsStage, IncidentStage]
        return Ingest(redis_client, lambda frame: True, clock=clock, stages=stages), clock
    return make


@pytest.mark.django_db
def test_a_slow_node_in_a_finished_sweep_fails_opens_a_network_incident_and_a_passing_sweep_heals_it(make_ingest):
    ingest, clock = make_ingest()
    run(ingest, clock, 3)
    finished_sweep(pairs_result(links(slow_node="c"), {}, 0.7), dt.datetime.now(dt.UTC))
    run(ingest, clock, 3)

    record = ingest.board["health"]["c"].record()
    assert record["verdict"] == health.FAILING
    assert [(f["check"], f["status"]) for f in record["findings"]] == [("fabric", "fail")]
    assert {ingest.board["health"][name].verdict for name in "abdefgh"} == {health.HEALTHY}
    [incident] = Incident.objects.all()
    assert (incident.node, incident.component, incident.end) == ("c", "network", None)
    assert incident.cause.startswith("Fabric bandwidth: fabric sweep ")

    # A restarted ingest reads the finding back from the sweeps: the node stays failing, the same incident.
    ingest, clock = make_ingest()
    run(ingest, clock, 3)
    assert ingest.board["health"]["c"].verdict == health.FAILING and Incident.objects.count() == 1

    finished_sweep(pairs_result(links(), {}, 0.7), dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    run(ingest, clock, 2)
    assert ingest.board["health"]["c"].verdict == health.HEALTHY
    run(ingest, clock, int(HEALED_AFTER) + 2)
    assert Incident.objects.get().end is not None


@pytest.mark.django_db
def test_a_sweep_whose_result_is_not_one_a_sweep_writes_is_skipped_once_and_the_others_count(make_ingest, caplog):
    ingest, clock = make_ingest()
    run(ingest, clock, 2)
    broken = finished_sweep({"median": 1.5, "node_medians": {"a": 1.5}, "slow_links": [["a", "b"]],
                             "links": [{"node": "a"}]}, dt.datetime.now(dt.UTC))
    finished_sweep(pairs_result(links(slow_node="c"), {}, 0.7), dt.datetime.now(dt.UTC))
    run(ingest, clock, 3)
    assert ingest.board["health"]["c"].verdict == health.FAILING
    skipped = [r.getMessage() for r in caplog.records if "is not one a sweep writes" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].startswith(f"fabric sweep {broken.pk}: ")
