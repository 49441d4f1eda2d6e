import datetime as dt
import time

import orjson
import pytest
from django.core.management import call_command

from dashboard.health.models import HealthChange
from dashboard.health.node_health import NodeHealthBook
from dashboard.live.models import GpuRollup
from gpulse import schema
from gpulse.health import action
from gpulse.keys import Keys
from tests.samples import sample
from tests.test_node_health import NVLINK_DOWN, finding, up, with_health

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(redis_client):
    """Two live nodes and one whose key expired."""
    keys = Keys()
    now = time.time()
    for name in ("n1", "n2"):
        redis_client.set(keys.node(name), schema.encode(sample(name, gpus=2, ts=now)))
        redis_client.hset(keys.known_nodes, name, f'{{"ts": {now}, "interval": 1.0}}')
    redis_client.hset(keys.known_nodes, "dead", f'{{"ts": {now - 600}, "interval": 1.0}}')
    return redis_client


def test_pages_need_login(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_api_answers_401_without_credentials(client):
    response = client.get("/api/v1/cluster")
    assert response.status_code == 401
    assert "authentication required" in response.json()["error"]


def test_cluster_api_lists_every_node_with_status(client, viewer_user, cluster):
    client.force_login(viewer_user)
    nodes = {n["node"]: n for n in client.get("/api/v1/cluster").json()["nodes"]}
    assert nodes["n1"]["status"] == "up" and len(nodes["n1"]["gpus"]) == 2
    assert nodes["n1"]["gpus"][0]["mem_total"] == 85520809984
    assert nodes["dead"]["status"] == "down" and nodes["dead"]["gpus"] == []


def test_a_bearer_token_from_issue_token_authenticates_scripts(client, viewer_user, cluster, capsys):
    call_command("issue_token", "viewer")
    token = capsys.readouterr().out.strip()
    response = client.get("/api/v1/cluster", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200 and len(response.json()["nodes"]) == 3
    assert client.get("/api/v1/cluster", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_node_api_returns_rollup_history_since(client, viewer_user, cluster):
    client.force_login(viewer_user)
    now = time.time()
    minute = int(now // 60) * 60 - 120
    GpuRollup.objects.create(
        node="n1", gpu=0, minute=dt.datetime.fromtimestamp(minute, dt.UTC), samples=60,
        util_min=10, util_mean=20, util_max=30, util_sum=1200, util_count=60,
    )
    body = client.get("/api/v1/nodes/n1?since=1h").json()
    assert body["status"] == "up"
    series = body["history"]["gpus"][0]
    assert series["ts"] == [minute] and series["util"] == [[10, 20, 30]]
    assert client.get(f"/api/v1/nodes/n1?since={now + 10}").json()["history"]["gpus"] == []
    bad = client.get("/api/v1/nodes/n1?since=yesterday")
    assert bad.status_code == 400 and "not a time" in bad.json()["error"]
    assert client.get("/api/v1/nodes/nope").status_code == 404


@pytest.mark.parametrize("query", ["since=1e20", "since=inf", "until=1e300", "since=nan", "until=-1e20",
                                   "since=99999999999d", "since=0001-01-01T00:00:00%2B14:00"])
def test_node_api_answers_400_to_a_time_that_overflows(client, viewer_user, cluster, query):
    client.force_login(viewer_user)
    response = client.get(f"/api/v1/nodes/n1?{query}")
    assert response.status_code == 400 and response.json()["error"]


def test_node_api_lists_its_probes_oldest_first(client, viewer_user, cluster):
    from collectors.probe import publish_probe

    for busbw in (9.0, 11.0):
        publish_probe(cluster, Keys(), {"v": 1, "node": "n1", "ts": time.time(), "busbw": busbw, "status": "succeeded"})
    client.force_login(viewer_user)
    assert [p["busbw"] for p in client.get("/api/v1/nodes/n1").json()["probes"]] == [9.0, 11.0]


def test_node_api_orders_probes_by_their_time_not_by_when_they_were_written(client, viewer_user, cluster):
    """A probe written late (its collector was slow to publish, or a test put one in) must not draw the probe
    chart's line backwards, nor put the pointer's tooltip on another probe: uPlot needs its times ascending."""
    from collectors.probe import publish_probe

    now = time.time()
    for ts, busbw in ((now - 60, 9.0), (now - 300, 8.0), (now, 11.0), (now - 30, 10.0)):
        publish_probe(cluster, Keys(), {"v": 1, "node": "n1", "ts": ts, "busbw": busbw, "status": "succeeded"})
    client.force_login(viewer_user)
    assert [p["busbw"] for p in client.get("/api/v1/nodes/n1").json()["probes"]] == [8.0, 9.0, 10.0, 11.0]


def test_healthz_is_public_and_reports_each_part(client, redis_client):
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 503  # no ingest heartbeat yet
    assert body["checks"]["redis"]["ok"] and body["checks"]["database"]["ok"]
    assert "not running" in body["checks"]["ingest"]["detail"]
    redis_client.set(Keys().ingest_heartbeat, f'{{"ts": {time.time()}, "lag_max": 0.2, "nodes": 3}}')
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["ok"]


def test_healthz_names_a_failing_part_without_its_error_text(client, monkeypatch, caplog):
    import redis

    from dashboard import redis_client
    from devtools.redis_server import free_port

    # A real client on a port nobody listens on: Redis is down.
    monkeypatch.setattr(redis_client, "_client", redis.Redis(port=free_port(), socket_connect_timeout=1))
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "unreachable"}
    assert "Connection refused" not in response.content.decode()
    assert "Connection refused" in caplog.text  # the operator finds the error in the log


@pytest.fixture
def health_of_cluster(cluster):
    """n1 failing with an NVLink link down (ingest's own record), n2 healthy; "dead" has no entry."""

    book = NodeHealthBook()
    book.update("n1", with_health("n1", NVLINK_DOWN, finding("pcie_link", "unknown", "not supported", gpu=0)))
    book.update("n2", with_health("n2"))
    book.tick(1_800_000_000.0, up("n1", "n2"), [])
    for name in ("n1", "n2"):
        cluster.hset(Keys().health, name, orjson.dumps(book.nodes[name].record()))
    changes = (("unknown", "healthy", ""), ("healthy", "failing", "GPU 3 NVLink links: link 2 down, 17 up"))
    for minute, (old, new, reason) in enumerate(changes):
        at = dt.datetime.fromtimestamp(1_800_000_000 + 60 * minute, dt.UTC)
        HealthChange.objects.create(node="n1", at=at, old=old, new=new, reason=reason)
    return cluster


def test_health_api_lists_every_nodes_status_and_verdict_down_first_then_worst(client, viewer_user,
                                                                               health_of_cluster):
    """Issue 32: a down node has no verdict ("unknown"), and was listed after the failing ones and counted
    nowhere; /health/ lists it first, as down, and counts it: the API says the same."""
    client.force_login(viewer_user)
    body = client.get("/api/v1/health").json()
    nodes = body["nodes"]
    assert [(n["node"], n["status"]) for n in nodes] == [("dead", "down"), ("n1", "up"), ("n2", "up")]
    assert nodes[0]["verdict"] == "unknown" and nodes[0]["reason"].startswith("node down")
    assert nodes[1] == {"node": "n1", "status": "up", "verdict": "failing",
                        "reason": "GPU 3 NVLink links: link 2 down, 17 up", "action": action("nvlink_state", "fail"),
                        "since": 1_800_000_000.0, "findings": 1}
    assert nodes[2] == {"node": "n2", "status": "up", "verdict": "healthy", "reason": "", "action": "",
                        "since": 1_800_000_000.0, "findings": 0}
    assert body["counts"] == {"down": 1, "failing": 1, "degraded": 0, "unknown": 0, "healthy": 1}


def test_node_health_api_lists_findings_passes_and_history_newest_first(client, viewer_user, health_of_cluster):
    client.force_login(viewer_user)
    body = client.get("/api/v1/nodes/n1/health").json()
    assert (body["node"], body["verdict"], body["since"]) == ("n1", "failing", 1_800_000_000.0)
    checks = {(c["id"], c["gpu"]): c for c in body["checks"]}
    assert checks[("nvlink_state", 3)]["status"] == "fail" and checks[("nvlink_state", 3)]["since"] == 1_800_000_000.0
    assert checks[("pcie_link", 0)]["status"] == "unknown" and checks[("pcie_link", 0)]["action"] == ""
    assert checks[("row_remap", None)] == {"id": "row_remap", "gpu": None, "status": "pass", "reason": "",
                                           "action": "", "since": None}
    assert ("nvlink_state", None) not in checks  # it has a finding: no pass entry
    assert body["history"] == [
        {"at": 1_800_000_060.0, "from": "healthy", "to": "failing", "reason": "GPU 3 NVLink links: link 2 down, 17 up"},
        {"at": 1_800_000_000.0, "from": "unknown", "to": "healthy", "reason": ""},
    ]


def test_node_health_api_answers_404_for_an_unknown_node_and_unknown_for_one_without_health(
        client, viewer_user, health_of_cluster):
    client.force_login(viewer_user)
    missing = client.get("/api/v1/nodes/nope/health")
    assert missing.status_code == 404 and missing.json() == {"error": "no node named 'nope'"}
    dead = client.get("/api/v1/nodes/dead/health").json()
    assert (dead["verdict"], dead["since"], dead["checks"], dead["history"]) == ("unknown", None, [], [])


def test_health_apis_need_login(client, health_of_cluster):
    for url in ("/api/v1/health", "/api/v1/nodes/n1/health"):
        assert client.get(url).status_code == 401


def test_a_malformed_health_entry_reads_as_no_verdict(client, viewer_user, health_of_cluster):
    health_of_cluster.hset(Keys().health, "n2", b'{"verdict": "fine"}')
    client.force_login(viewer_user)
    nodes = {n["node"]: n for n in client.get("/api/v1/health").json()["nodes"]}
    assert nodes["n2"]["verdict"] == "unknown"
    assert client.get("/api/v1/nodes/n2/health").json()["verdict"] == "unknown"
