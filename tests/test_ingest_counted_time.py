"""Time is the control host's (issue 31): usage counts the time the stream saw pass, whatever a sample's
``interval`` says, and a second collector writing as the same node is flagged, not summed.

A real Redis and database, and Ingest as the other ingest tests build it; entry ids are arrival times
(the stream's clock), as XADD with explicit ids would make them.
"""

import time

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import FIRING, Alert, Rule
from dashboard.live.identity import FIRST_SAMPLE_MAX, TWIN_CLEAR_AFTER, CollectorIdentity, CountedTime
from dashboard.live.models import ClusterUsage, GpuUsage
from gpulse import schema
from gpulse.keys import Keys
from tests.samples import gpu, sample
from tests.test_ingest import entry_at, frames, make_ingest, xadd  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

T0 = 1_700_000_040.0  # on a minute


def held_by(user: str, node: str, ts: float, interval: float, gpus: int = 2, **stamp) -> dict:
    """A sample of ``gpus`` GPUs, each held by one process of ``user``, drawing 300 W (no energy counter)."""
    s = sample(node, gpus=0, ts=ts, interval=interval)
    pid = 4000 + 10 * len(user)  # another user's process is another pid
    s["gpus"] = [gpu(i, util=90, power=300.0, processes=[{"pid": pid + i, "name": "python", "user": user,
                                                         "mem_used": 2**33, "job": "7", "step": "0"}])
                 for i in range(gpus)]
    return {**s, **stamp}


def seconds_by(field: str = "allocated_seconds", **filters) -> dict:
    totals: dict = {}
    for row in GpuUsage.objects.filter(**filters):
        totals[(row.user, row.gpu)] = totals.get((row.user, row.gpu), 0.0) + getattr(row, field)
    return totals


# -- 1. counted seconds ---------------------------------------------------------------------------------------------

def test_samples_a_second_apart_claiming_an_hour_count_a_second_each(make_ingest, frames):  # noqa: F811
    ingest = make_ingest()
    for second in range(120):  # 120 s of 2 GPUs, each sample saying it stands for an hour
        ingest.apply(held_by("mallory", "liar", T0 + second, interval=3600.0), entry_at(T0 + second))
    ingest.flush()
    allocated = seconds_by(node="liar")
    # The first sample has nothing before it to measure from: it counts its interval, at most FIRST_SAMPLE_MAX;
    # every later one the second the stream saw pass. Before: 2 × 120 × 3600 s (240 GPU-hours).
    assert allocated == {("mallory", 0): pytest.approx(FIRST_SAMPLE_MAX + 119),
                         ("mallory", 1): pytest.approx(FIRST_SAMPLE_MAX + 119)}
    assert sum(allocated.values()) / 3600 < 0.1  # GPU-hours, not 240
    energy = seconds_by("energy_j", node="liar")
    assert energy[("mallory", 0)] == pytest.approx(300.0 * (FIRST_SAMPLE_MAX + 119)), "power × the counted seconds"
    assert sum(row.seconds for row in ClusterUsage.objects.all()) == pytest.approx(2 * (FIRST_SAMPLE_MAX + 119))
    # The live view keeps what the node said, for its status.
    ingest.emit(time.time())
    assert frames[-1]["nodes"]["liar"]["interval"] == 3600.0
    assert ingest.state.nodes["liar"].interval == 3600.0


def test_through_the_stream_an_hour_claimed_every_second_counts_the_seconds(redis_client, make_ingest):  # noqa: F811
    ingest = make_ingest()
    start = time.time() - 30
    for second in range(20):  # XADD with explicit ids a second apart
        xadd(redis_client, schema.encode(held_by("mallory", "liar", start + second, interval=3600.0)),
             at=start + second)
    while ingest.read(block_ms=10):
        pass
    ingest.flush()
    assert ingest.processed == 20
    assert sum(seconds_by(node="liar").values()) == pytest.approx(2 * (FIRST_SAMPLE_MAX + 19))


@pytest.mark.parametrize("interval", [1.0, 30.0])
def test_honest_samples_count_exactly_as_before(make_ingest, interval):  # noqa: F811
    ingest = make_ingest()
    for step in range(40):
        ts = T0 + step * interval
        ingest.apply(held_by("alice", "honest", ts, interval=interval), entry_at(ts))
    ingest.flush()
    assert seconds_by(node="honest") == {("alice", 0): pytest.approx(40 * interval),
                                         ("alice", 1): pytest.approx(40 * interval)}


def test_arrivals_off_the_grid_lose_no_time_over_a_run(make_ingest):  # noqa: F811
    """A sample that arrives late leaves its extra for the next, early one: the total is the stream's time."""
    ingest = make_ingest()
    arrivals = [T0 + step + (0.0, 0.3, -0.2, 0.45, -0.1)[step % 5] for step in range(100)]
    for step, at in enumerate(arrivals):
        ingest.apply(held_by("alice", "jittery", T0 + step, interval=1.0), entry_at(at))
    ingest.flush()
    # Each is placed at its own ts, or its arrival where that is earlier: what the stream saw pass, never more.
    total = seconds_by(node="jittery")[("alice", 0)]
    assert total <= 1 + 1 + arrivals[-1] - arrivals[0]
    assert total == pytest.approx(100.0, abs=0.25)  # before: 100 s


def test_a_backlog_written_at_once_after_an_outage_counts_the_time_it_covers(make_ingest):  # noqa: F811
    ingest = make_ingest()
    for second in range(10):
        ingest.apply(held_by("alice", "n1", T0 + second, interval=1.0), entry_at(T0 + second))
    back = T0 + 40  # Redis was away for 30 s; the collector writes what it held, each with its "held"
    for second in range(10, 40):
        ingest.apply(held_by("alice", "n1", T0 + second, interval=1.0), entry_at(back), held=back - (T0 + second))
    ingest.apply(held_by("alice", "n1", back, interval=1.0), entry_at(back))
    ingest.flush()
    assert seconds_by(node="n1") == {("alice", 0): pytest.approx(41.0), ("alice", 1): pytest.approx(41.0)}


def test_counted_time_never_exceeds_the_stream_time_whatever_held_and_interval_say():
    counted = CountedTime()
    total = counted.seconds(1000.0 - 3000, 1000.0, 3600.0)
    assert total == FIRST_SAMPLE_MAX
    for k in range(1, 200):  # held or ts placing samples back and forth
        arrived = 1000.0 + k
        total += counted.seconds(arrived - (0.0, 3000.0, 5.0, 600.0)[k % 4], arrived, 3600.0)
    assert total <= FIRST_SAMPLE_MAX + 1 + 199 + 1e-9


# -- 2. twin collectors -------------------------------------------------------------------------------------------

def interleave(ingest, seconds: int, start: float = T0, users=("alice", "mallory"), boots=("run-a", "run-b")):
    """Two collectors as node n1, each every second, half a second apart: run-a (seen first) and run-b."""
    for second in range(seconds):
        for offset, user, boot in ((0.0, users[0], boots[0]), (0.5, users[1], boots[1])):
            at = start + second + offset
            ingest.apply(held_by(user, "n1", at, interval=1.0, seq=second, boot=boot), entry_at(at))


def test_two_collectors_as_one_node_are_flagged_and_counted_once(redis_client, make_ingest, frames,  # noqa: F811
                                                                  admin_client):
    ingest = make_ingest()
    start = time.time() - 60
    interleave(ingest, 60, start)
    ingest.emit(time.time())
    node = ingest.state.nodes["n1"]
    assert node.identity.twin_since == pytest.approx(start + 1)
    assert node.identity.boot == "run-a", "the collector seen first keeps the node"
    assert node.sample["gpus"][0]["processes"][0]["user"] == "alice"
    # Flagged in the frame, the known-nodes hash (the node page and API read it), the heartbeat and /metrics.
    assert frames[-1]["nodes"]["n1"]["twin"] == pytest.approx(start + 1)
    assert orjson.loads(redis_client.hget(Keys().known_nodes, "n1"))["twin"] == pytest.approx(start + 1)
    beat = orjson.loads(redis_client.get(Keys().ingest_heartbeat))
    assert beat["nodes_twin"] == 1 and beat["twin_dropped"] == 59
    assert admin_client.get("/api/v1/nodes/n1").json()["twin_collectors"] == pytest.approx(start + 1)
    # The node page starts from the same view (its script turns it into the warning line, as text).
    page = admin_client.get("/nodes/n1/").content.decode()
    data = page.split('id="node-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert orjson.loads(data)["twin_collectors"] == pytest.approx(start + 1)
    metrics = {family.name: family for family in text_string_to_metric_families(admin_client.get("/metrics")
                                                                                .content.decode())}
    assert [(s.labels, s.value) for s in metrics["gpulse_node_twin_collectors"].samples] == [({"node": "n1"}, 1.0)]
    assert metrics["gpulse_ingest_twin_dropped_samples"].samples[0].value == 59
    # Usage counts one collector's time, not twice: 60 s per GPU (mallory's one sample before run-a came back
    # counted half a second, taken from alice's).
    ingest.flush()
    allocated = seconds_by(node="n1")
    assert allocated[("alice", 0)] + allocated[("mallory", 0)] == pytest.approx(60.0)
    assert allocated[("mallory", 0)] == pytest.approx(0.5)


def test_the_default_alert_rule_fires_for_a_twin_collector(make_ingest):  # noqa: F811
    rule = Rule.objects.get(metric="node.twin_collector")
    assert (rule.severity, rule.enabled) == ("warning", True)
    ingest = make_ingest()
    now = time.time()
    interleave(ingest, 5, now - 5)
    ingest.emit(now)
    evaluator = AlertEvaluator()
    evaluator.evaluate(ingest.state, now=now)
    evaluator.evaluate(ingest.state, now=now + rule.for_seconds + 1)
    assert Alert.objects.get(rule=rule, node="n1").status == FIRING


def test_a_collector_that_restarts_is_no_twin(redis_client, make_ingest):  # noqa: F811
    ingest = make_ingest()
    for second in range(10):
        ingest.apply(held_by("alice", "n1", T0 + second, interval=1.0, seq=second, boot="old"), entry_at(T0 + second))
    for second in range(10, 30):  # a new run; the old one is never heard again
        ingest.apply(held_by("alice", "n1", T0 + second, interval=1.0, seq=second - 10, boot="new"),
                     entry_at(T0 + second))
    node = ingest.state.nodes["n1"]
    assert node.identity.twin_since is None and node.identity.restarts == 1 and ingest.collector_restarts == 1
    ingest.emit(time.time())
    assert orjson.loads(redis_client.get(Keys().ingest_heartbeat))["nodes_twin"] == 0
    ingest.flush()
    assert seconds_by(node="n1") == {("alice", 0): pytest.approx(30.0), ("alice", 1): pytest.approx(30.0)}


def test_the_other_collector_takes_the_node_over_once_the_first_goes_quiet_and_the_flag_clears():
    identity = CollectorIdentity()
    assert identity.check("a", 0, T0) == "new"
    assert identity.check("b", 0, T0 + 0.5) == "restart"
    assert identity.check("a", 1, T0 + 1) == "takeover"  # seen first: it keeps the node
    assert identity.check("b", 1, T0 + 1.5) == "twin"
    # run-a stops; run-b takes over after two of run-a's intervals.
    assert identity.check("b", 2, T0 + 2.5) == "twin"
    assert identity.check("b", 3, T0 + 3.5) == "takeover" and identity.boot == "b"
    assert identity.twin_since == T0 + 1
    later = T0 + 3.5 + TWIN_CLEAR_AFTER + 1
    assert identity.check("b", 4, later) == "new" and identity.twin_since is None


def test_a_late_entry_of_an_earlier_run_is_no_twin():
    identity = CollectorIdentity()
    identity.check("a", 0, T0)
    identity.check("b", 0, T0 + 5)
    assert identity.check("a", 1, T0 + 1) == "earlier run"  # reached the stream before run-b began
    assert identity.twin_since is None
