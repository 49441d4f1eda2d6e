import time

import pytest
from django.core.management import call_command

from dashboard.live.models import GpuRollup
from gpulse import schema
from gpulse.keys import Keys
from tests.samples import sample

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
    import datetime as dt

    GpuRollup.objects.create(
        node="n1", gpu=0, minute=dt.datetime.fromtimestamp(minute, dt.UTC), samples=60,
        util_min=10, util_mean=20, util_max=30,
    )
    body = client.get("/api/v1/nodes/n1?since=1h").json()
    assert body["status"] == "up"
    series = body["history"]["gpus"][0]
    assert series["ts"] == [minute] and series["util"] == [[10, 20, 30]]
    assert client.get(f"/api/v1/nodes/n1?since={now + 10}").json()["history"]["gpus"] == []
    bad = client.get("/api/v1/nodes/n1?since=yesterday")
    assert bad.status_code == 400 and "not a time" in bad.json()["error"]
    assert client.get("/api/v1/nodes/nope").status_code == 404


def test_node_api_lists_its_probes_oldest_first(client, viewer_user, cluster):
    from collectors.probe import publish_probe

    for busbw in (9.0, 11.0):
        publish_probe(cluster, Keys(), {"v": 1, "node": "n1", "ts": time.time(), "busbw": busbw, "status": "succeeded"})
    client.force_login(viewer_user)
    assert [p["busbw"] for p in client.get("/api/v1/nodes/n1").json()["probes"]] == [9.0, 11.0]


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
