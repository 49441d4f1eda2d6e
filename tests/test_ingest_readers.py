"""What collectors and older ingests leave behind, read by the web: hostile node keys and names
never turn a page, the API or /metrics into a 500; a failing alert evaluation turns /healthz red."""

import time

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import Alert, Rule, fingerprint
from dashboard.live.ingest import Ingest
from dashboard.probes.tracker import ProbeTracker
from gpulse import schema
from gpulse.keys import Keys
from tests.ingest_stages import with_alerts
from tests.samples import sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client):
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    client.force_login(user)
    return user


@pytest.fixture
def hostile_cluster(redis_client):
    """A good node, and a node whose collector wrote a key the sample contract rejects."""
    keys, now = Keys(), time.time()
    redis_client.set(keys.node("good"), schema.encode(sample("good", ts=now, interval=60)))
    redis_client.set(keys.node("hostile"), schema.encode(sample("hostile", ts=now, interval=60, throttle=5)))
    for name in ("good", "hostile"):
        redis_client.hset(keys.known_nodes, name, orjson.dumps({"ts": now, "interval": 60}))
    return redis_client


def test_a_hostile_node_key_shows_as_down_with_its_reason_and_metrics_still_answer(client, alice, hostile_cluster):
    nodes = {node["node"]: node for node in client.get("/api/v1/cluster").json()["nodes"]}
    assert nodes["good"]["status"] == "up" and len(nodes["good"]["gpus"]) == 2
    assert nodes["hostile"]["status"] == "down" and nodes["hostile"]["gpus"] == []
    assert "'throttle' is not a list" in nodes["hostile"]["error"]
    assert client.get("/nodes/hostile/").status_code == 200
    assert client.get("/api/v1/nodes/hostile").json()["status"] == "down"
    response = client.get("/metrics")
    assert response.status_code == 200
    ups = {s.labels["node"]: s.value for f in text_string_to_metric_families(response.content.decode())
           for s in f.samples if s.name == "gpulse_node_up"}
    assert ups == {"good": 1, "hostile": 0}


@pytest.mark.parametrize("remembered", [b"{", b"[1]", b'{"ts": "soon"}', b'{"ts": 1.0, "arrived": 1e308}',
                                        b'{"ts": 1.0, "skew": "far"}', b'{"ts": 1.0, "restarts": -1}'])
def test_a_known_nodes_entry_that_is_not_valid_breaks_neither_the_api_nor_metrics(
    client, alice, hostile_cluster, remembered
):
    # Ingest writes the known-nodes hash, but it lives in Redis: read back, it is checked.
    hostile_cluster.hset(Keys().known_nodes, "good", remembered)
    nodes = {node["node"]: node for node in client.get("/api/v1/cluster").json()["nodes"]}
    assert nodes["good"]["status"] == "up" and len(nodes["good"]["gpus"]) == 2  # judged by its own key
    assert client.get("/api/v1/nodes/good").json()["status"] == "up"
    assert client.get("/metrics").status_code == 200


HOSTILE_PROBES = [b"{", b"[1]", b'{"node": "good", "ts": 1.0, "status": "succeeded", "busbw": "fast"}',
                  b'{"node": "a/b", "ts": 1.0, "status": "succeeded"}', b'{"node": "good", "ts": 1.0, "status": "won"}',
                  b'{"node": "good", "ts": "now", "status": "failed"}']


def test_probe_results_that_are_not_valid_are_skipped_by_ingest_and_the_node_api(client, alice, hostile_cluster):
    keys = Keys()
    good = {"v": 1, "node": "good", "ts": time.time(), "status": "succeeded", "busbw": 10.0}
    for raw in HOSTILE_PROBES:
        hostile_cluster.xadd(keys.probe_stream("good"), {"p": raw})
        hostile_cluster.lpush(keys.probe_history("good"), raw)
    hostile_cluster.xadd(keys.probe_stream("good"), {"p": orjson.dumps(good)})
    hostile_cluster.lpush(keys.probe_history("good"), orjson.dumps(good))
    tracker = ProbeTracker(hostile_cluster, keys, 0.2)
    tracker.seed(["good"])
    tracker.last_ids["good"] = "0-0"
    assert tracker.poll() == {"good"} and tracker.busbw() == {"good": 10.0}
    probes = client.get("/api/v1/nodes/good").json()["probes"]
    assert [probe["busbw"] for probe in probes] == [10.0]


def test_an_alert_on_a_node_named_with_a_slash_does_not_break_the_alerts_page(client, alice):
    rule = Rule.objects.create(name="hot", metric="gpu.temp", threshold=85)
    Alert.objects.create(fingerprint=fingerprint(rule.id, "a/b", 0), rule=rule, node="a/b", gpu=0,
                         status="firing", status_since=timezone.now())
    response = client.get("/alerts/")
    assert response.status_code == 200
    assert b'href="/nodes/a/b/"' in response.content
    assert client.get("/nodes/a/b/").status_code == 404  # no data under that name: a clean 404, not a 500


def test_healthz_turns_red_while_alert_evaluation_fails(client, redis_client, django_db_blocker):
    # reload_every=0: the evaluator reads its rules from the database every tick.
    ingest = Ingest(redis_client, lambda frame: True, stages=with_alerts(AlertEvaluator(reload_every=0)))
    ingest.emit(time.time())
    assert client.get("/healthz").json()["checks"]["alerts"]["ok"]
    with django_db_blocker.block():  # the evaluator's database stops answering
        ingest.emit(time.time())
        ingest.emit(time.time())  # the heartbeat carries the previous tick's evaluation
    body = client.get("/healthz").json()
    assert not body["ok"] and not body["checks"]["alerts"]["ok"]
    assert "failing since" in body["checks"]["alerts"]["detail"]
    beat = orjson.loads(redis_client.get(Keys().ingest_heartbeat))
    assert beat["alerts"]["error"]
    ingest.emit(time.time())
    ingest.emit(time.time())
    assert client.get("/healthz").json()["checks"]["alerts"]["ok"]


def test_rejected_entries_are_a_number_on_healthz_and_a_counter_on_metrics_never_red(client, alice, redis_client):
    ingest = Ingest(redis_client, lambda frame: True, stages=with_alerts(AlertEvaluator()))
    redis_client.xadd(Keys().telemetry_stream("n1"), {"s": schema.encode(sample("n1", throttle=1))})
    redis_client.xadd(Keys().telemetry_stream("n1"), {"s": schema.encode(sample("n1", util=1e19))})
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    body = client.get("/healthz").json()
    assert body["checks"]["ingest"]["ok"] and body["checks"]["alerts"]["ok"]
    assert "1 entries rejected" in body["checks"]["ingest"]["detail"]
    counters = {s.name: s.value for f in text_string_to_metric_families(client.get("/metrics").content.decode())
                for s in f.samples if s.name.startswith(("gpulse_ingest_", "gpulse_alert_evaluation"))}
    assert counters == {"gpulse_ingest_rejected_entries_total": 1, "gpulse_ingest_nulled_readings_total": 2,
                        "gpulse_ingest_lost_samples_total": 0, "gpulse_ingest_lost_usage_samples_total": 0,
                        "gpulse_alert_evaluation_ok": 1, "gpulse_ingest_twin_dropped_samples_total": 0}
