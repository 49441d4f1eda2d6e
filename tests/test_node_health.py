"""Node health on the control host: verdicts, since-times, the worst finding, version skew, restarts."""

import logging
from types import SimpleNamespace

import orjson
import pytest

from dashboard.health.node_health import NodeHealthBook, read_record
from dashboard.health.stage import HealthStage
from dashboard.live.ingest import Ingest
from gpulse import health, schema
from gpulse.keys import Keys
from gpulse.status import DOWN, UP
from tests.ingest_stages import STAGES, stage_of
from tests.samples import sample


def finding(check: str, status: str, reason: str, gpu: int | None = None) -> dict:
    return {"check": check, "gpu": gpu, "status": status, "reason": reason}


def with_health(node: str, *findings: dict, checked=("pcie_link", "nvlink_state", "row_remap", "ib_port"),
                driver: str | None = None, cuda: str = "12.4", model: str | None = None, group: str | None = None,
                **kwargs) -> dict:
    reading = sample(node, **kwargs)
    reading["health"] = {"checked": list(checked), "findings": list(findings)}
    if driver is not None:
        reading["system"] = {"driver": driver, "cuda": cuda, "group": group}
    if model is not None:
        for gpu in reading["gpus"]:
            gpu["name"] = model
    return reading


def up(*names: str, status: str = UP) -> dict:
    return {name: SimpleNamespace(status=status) for name in names}


NVLINK_DOWN = finding("nvlink_state", health.FAIL, "link 2 down, 17 up", gpu=3)


def test_a_new_finding_holds_since_it_first_came_and_keeps_that_while_it_stays():
    book = NodeHealthBook()
    book.update("n1", with_health("n1"))
    book.tick(100.0, up("n1"), [])
    book.update("n1", with_health("n1", NVLINK_DOWN))
    assert book.tick(101.0, up("n1"), []) == ["n1"]
    # The same finding with another reason (a rate moved) keeps its since.
    book.update("n1", with_health("n1", {**NVLINK_DOWN, "reason": "link 2 down, 16 up"}))
    book.tick(102.0, up("n1"), [])
    node = book.nodes["n1"]
    [held] = node.findings.values()
    assert held.since == 101.0 and held.reason == "link 2 down, 16 up"
    assert (node.verdict, node.since) == (health.FAILING, 101.0)


def test_a_finding_that_changes_status_is_a_new_one_and_a_gone_one_is_dropped():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", finding("row_remap", health.WARN, "a remap is pending", gpu=1)))
    book.tick(100.0, up("n1"), [])
    book.update("n1", with_health("n1", finding("row_remap", health.FAIL, "remapping failed", gpu=1)))
    book.tick(105.0, up("n1"), [])
    assert [(key, f.since) for key, f in book.nodes["n1"].findings.items()] == [(("row_remap", 1, "fail"), 105.0)]
    book.update("n1", with_health("n1"))
    book.tick(110.0, up("n1"), [])
    node = book.nodes["n1"]
    assert node.findings == {} and (node.verdict, node.since) == (health.HEALTHY, 110.0)


def test_an_unchanged_node_is_not_reported_changed():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", NVLINK_DOWN))
    assert book.tick(100.0, up("n1"), []) == ["n1"]
    book.update("n1", with_health("n1", NVLINK_DOWN))
    assert book.tick(101.0, up("n1"), []) == []


def test_verdicts_and_their_changes_are_recorded_with_the_reason():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", finding("clocks", health.WARN, "thermal slowdown while busy", gpu=0)))
    book.tick(100.0, up("n1"), [])
    book.update("n1", with_health("n1", NVLINK_DOWN))
    book.tick(101.0, up("n1"), [])
    changes = book.take_changes()
    assert [(c.node, c.at, c.old, c.new) for c in changes] == [
        ("n1", 100.0, "unknown", "degraded"), ("n1", 101.0, "degraded", "failing")]
    assert changes[1].reason == "GPU 3 NVLink links: link 2 down, 17 up"
    assert book.take_changes() == []


def test_a_node_checks_reason_is_not_prefixed_with_a_gpu():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", finding("gpu_count", health.FAIL, "GPU 3 missing: 7 of 8 on the bus", gpu=3)))
    book.tick(100.0, up("n1"), [])
    assert book.nodes["n1"].frame_entry()["reason"] == "GPU count: GPU 3 missing: 7 of 8 on the bus"


def test_an_unknown_finding_alone_leaves_the_node_healthy():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", finding("pcie_link", health.UNKNOWN, "not supported", gpu=0)))
    book.tick(100.0, up("n1"), [])
    assert book.nodes["n1"].frame_entry() == {"verdict": "healthy"}


def test_a_node_first_seen_without_health_is_unknown_without_a_verdict_change():
    book = NodeHealthBook()
    book.update("quiet", sample("quiet"))
    assert book.tick(100.0, up("quiet"), []) == ["quiet"]
    assert book.nodes["quiet"].since == 100.0 and book.take_changes() == []


def test_a_node_without_health_that_goes_down_says_so():
    book = NodeHealthBook()
    book.update("quiet", sample("quiet"))
    book.tick(100.0, up("quiet"), [])
    assert book.nodes["quiet"].frame_entry()["reason"] == "its source runs no health checks"
    assert book.tick(110.0, up("quiet", status=DOWN), ["quiet"]) == ["quiet"]
    assert book.nodes["quiet"].frame_entry()["reason"] == "node down: nothing current is known of its health"


def test_a_node_without_health_or_down_has_no_verdict():
    book = NodeHealthBook()
    book.update("quiet", sample("quiet"))
    book.update("n1", with_health("n1", NVLINK_DOWN))
    book.tick(100.0, up("quiet", "n1"), [])
    assert book.nodes["quiet"].summary()["verdict"] == "unknown"
    assert book.nodes["quiet"].summary()["reason"] == "its source runs no health checks"
    assert book.tick(110.0, up("n1", status=DOWN), ["n1"]) == ["n1"]
    entry = book.nodes["n1"].frame_entry()
    assert entry == {"verdict": "unknown", "reason": "node down: nothing current is known of its health",
                     "action": "", "since": 110.0, "findings": 0}


def test_the_reason_is_the_worst_finding_fail_before_warn_before_unknown_then_catalogue_order():
    book = NodeHealthBook()
    book.update("n1", with_health(
        "n1",
        finding("pcie_link", health.UNKNOWN, "not supported", gpu=0),
        finding("clocks", health.WARN, "thermal slowdown while busy", gpu=2),
        finding("ib_port", health.FAIL, "mlx5_1/1 DOWN/Polling"),
        finding("row_remap", health.WARN, "a remap is pending", gpu=5),
        NVLINK_DOWN,
    ))
    book.tick(100.0, up("n1"), [])
    entry = book.nodes["n1"].frame_entry()
    # nvlink_state comes before ib_port in the catalogue; both fail.
    assert entry["reason"] == "GPU 3 NVLink links: link 2 down, 17 up"
    assert entry["action"] == health.action("nvlink_state", health.FAIL)
    assert entry["findings"] == 4 and entry["verdict"] == "failing"
    record = book.nodes["n1"].record()
    assert [f["check"] for f in record["findings"]] == ["nvlink_state", "ib_port", "row_remap", "clocks", "pcie_link"]

    book.update("n1", with_health("n1", finding("clocks", health.WARN, "thermal slowdown while busy", gpu=2),
                                  finding("row_remap", health.WARN, "a remap is pending", gpu=5)))
    book.tick(101.0, up("n1"), [])
    entry = book.nodes["n1"].frame_entry()
    assert entry["reason"] == "GPU 5 Row remapping: a remap is pending"
    assert entry["action"] == health.action("row_remap", health.WARN)


def test_a_node_whose_driver_differs_from_the_majority_gets_a_version_skew_warning():
    book = NodeHealthBook()
    names = [f"n{i}" for i in range(10)]
    for name in names:
        book.update(name, with_health(name, driver="550.54.15", model="NVIDIA H100 80GB HBM3"))
    book.update("n9", with_health("n9", driver="535.104.05", model="NVIDIA H100 80GB HBM3"))
    book.update("quiet", sample("quiet"))  # reports no versions: neither counted nor flagged
    book.tick(100.0, up(*names, "quiet"), [])
    odd = book.nodes["n9"]
    assert odd.verdict == health.DEGRADED
    assert odd.summary()["reason"] == "Version skew: driver 535.104.05, the cluster runs 550.54.15 (9 of 10 nodes)"
    assert odd.findings[("version_skew", None, "warn")].since == 100.0
    assert "version_skew" in odd.checked
    assert all(book.nodes[name].verdict == health.HEALTHY for name in names[:9])

    # The node is upgraded: the warning goes.
    book.update("n9", with_health("n9", driver="550.54.15", model="NVIDIA H100 80GB HBM3"))
    assert book.tick(101.0, up(*names), []) == ["n9"]
    assert book.nodes["n9"].verdict == health.HEALTHY


def test_version_skew_compares_cuda_and_gpu_model_and_without_a_majority_flags_no_one():
    book = NodeHealthBook()
    for i in range(3):
        book.update(f"n{i}", with_health(f"n{i}", driver="550.54.15", cuda="12.4", model="NVIDIA H100 80GB HBM3"))
    book.update("n3", with_health("n3", driver="550.54.15", cuda="12.2", model="NVIDIA A100-SXM4-80GB"))
    book.tick(100.0, up("n0", "n1", "n2", "n3"), [])
    assert book.nodes["n3"].findings[("version_skew", None, "warn")].reason == (
        "CUDA 12.2, the cluster runs 12.4 (3 of 4 nodes); "
        "GPU model NVIDIA A100-SXM4-80GB, the cluster runs NVIDIA H100 80GB HBM3 (3 of 4 nodes)")

    tie = NodeHealthBook()
    tie.update("a", with_health("a", driver="550.54.15"))
    tie.update("b", with_health("b", driver="535.104.05"))
    tie.tick(100.0, up("a", "b"), [])
    assert tie.nodes["a"].verdict == tie.nodes["b"].verdict == health.HEALTHY

    mixed = NodeHealthBook()  # the most common model on 2 of 5 nodes is no majority
    models = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA L4")
    for i, model in enumerate(models):
        mixed.update(f"m{i}", with_health(f"m{i}", driver="550.54.15", model=model))
    mixed.tick(100.0, up(*(f"m{i}" for i in range(5))), [])
    assert {node.verdict for node in mixed.nodes.values()} == {health.HEALTHY}


def test_version_skew_compares_each_node_with_its_own_group():
    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    book = NodeHealthBook()
    for i in range(4):
        book.update(f"h{i}", with_health(f"h{i}", driver="550.54.15", model=h100, group="h100"))
    # A partition of A100s on its own driver is not skew against the H100 partition.
    for i in range(3):
        book.update(f"a{i}", with_health(f"a{i}", driver="535.104.05", model=a100, group="a100"))
    book.update("a3", with_health("a3", driver="550.54.15", model=a100, group="a100"))
    # An H100 that landed in the A100 partition is.
    book.update("a4", with_health("a4", driver="535.104.05", model=h100, group="a100"))
    nodes = [*(f"h{i}" for i in range(4)), *(f"a{i}" for i in range(5))]
    book.tick(100.0, up(*nodes), [])
    flagged = {name: node.findings[("version_skew", None, "warn")].reason
               for name, node in book.nodes.items() if node.verdict != health.HEALTHY}
    assert flagged == {
        "a3": "driver 550.54.15, group a100 runs 535.104.05 (4 of 5 nodes)",
        "a4": "GPU model NVIDIA H100 80GB HBM3, group a100 runs NVIDIA A100-SXM4-80GB (4 of 5 nodes)",
    }

    # A node joining one group changes nothing for the other.
    book.update("h4", with_health("h4", driver="550.54.15", model=h100, group="h100"))
    assert book.tick(101.0, up(*nodes, "h4"), []) == ["h4"]


def test_the_majority_is_counted_as_nodes_change_and_are_forgotten():
    book = NodeHealthBook()
    for name, driver in (("a", "1"), ("b", "1"), ("c", "2"), ("d", "2"), ("e", "2")):
        book.update(name, with_health(name, driver=driver))
    book.tick(100.0, up(*"abcde"), [])
    assert book.nodes["a"].verdict == health.DEGRADED and book.nodes["c"].verdict == health.HEALTHY
    book.forget("d")
    book.forget("e")
    book.update("f", with_health("f", driver="1"))
    # The majority moved to "1": every node reporting versions is judged again, not only those that sampled.
    assert sorted(book.tick(101.0, up(*"abcf"), [])) == ["a", "b", "c", "f"]
    assert [book.nodes[name].verdict for name in "abcf"] == [health.HEALTHY, health.HEALTHY, health.DEGRADED,
                                                             health.HEALTHY]


def test_a_hash_entry_reads_back_and_a_malformed_one_is_refused():
    book = NodeHealthBook()
    book.update("n1", with_health("n1", NVLINK_DOWN, driver="550.54.15"))
    book.tick(100.0, up("n1"), [])
    record = read_record(orjson.dumps(book.nodes["n1"].record()))
    assert record["findings"][0]["action"] == health.action("nvlink_state", health.FAIL)
    for bad in (b"not json", b"[]", orjson.dumps({**record, "verdict": "fine"}),
                orjson.dumps({**record, "since": 1e300}),
                orjson.dumps({**record, "findings": [{**record["findings"][0], "status": "pass"}]}),
                orjson.dumps({**record, "findings": [{**record["findings"][0], "reason": "x" * 300}]})):
        with pytest.raises(schema.MalformedSample):
            read_record(bad)


# -- through ingest and Redis ------------------------------------------------


@pytest.fixture
def make_ingest(redis_client):
    def make(clock):
        return Ingest(redis_client, lambda frame: True, clock=clock, stages=STAGES)

    return make


def entry_at(ts: float, seq: int = 0) -> bytes:
    return f"{int(ts * 1000)}-{seq}".encode()


@pytest.mark.django_db
def test_since_times_survive_an_ingest_restart(redis_client, make_ingest):
    now = [1_800_000_000.0]
    first = make_ingest(lambda: now[0])
    reading = with_health("n1", NVLINK_DOWN, ts=now[0], driver="550.54.15")
    first.apply(reading, entry_at(now[0]))
    first.emit(now[0])
    before = orjson.loads(redis_client.hget(Keys().health, "n1"))
    assert before["verdict"] == "failing" and before["since"] == now[0]

    now[0] += 30
    second = make_ingest(lambda: now[0])
    second.load_known_nodes()
    again = with_health("n1", NVLINK_DOWN, ts=now[0], driver="550.54.15")
    second.apply(again, entry_at(now[0]))
    second.emit(now[0])
    node = stage_of(second, HealthStage).book.nodes["n1"]
    assert (node.verdict, node.since) == ("failing", now[0] - 30)
    assert node.findings[("nvlink_state", 3, "fail")].since == now[0] - 30
    health = stage_of(second, HealthStage)
    assert health.book.take_changes() == health.changes.pending == []


@pytest.mark.django_db
def test_a_malformed_health_entry_in_redis_is_skipped_with_a_log(redis_client, make_ingest, caplog):
    now = 1_800_000_000.0
    first = make_ingest(lambda: now)
    for name in ("n1", "n2"):
        first.apply(with_health(name, NVLINK_DOWN, ts=now), entry_at(now, int(name[1])))
    first.emit(now)
    redis_client.hset(Keys().health, "n1", b'{"verdict": "on fire"}')

    second = make_ingest(lambda: now + 5)
    with caplog.at_level(logging.WARNING, logger="gpulse.ingest"):
        second.load_known_nodes()
    assert "node n1: its health in Redis is not valid" in caplog.text
    assert stage_of(second, HealthStage).book.nodes["n1"].since is None  # judged afresh
    assert stage_of(second, HealthStage).book.nodes["n2"].since == now
