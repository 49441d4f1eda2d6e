import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from dashboard.accounts.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_cache(redis_client):
    cache.clear()


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice", password="right-password-1")


def login(client, password):
    return client.post("/accounts/login/", {"username": "alice", "password": password})


def test_a_user_logs_in_and_out(client, alice):
    response = login(client, "right-password-1")
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_repeated_failed_logins_lock_the_account_out_even_with_the_right_password(client, alice):
    for _ in range(5):
        assert login(client, "wrong").status_code == 200
    response = login(client, "right-password-1")
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert client.get("/").status_code == 302  # still not logged in


def test_launches_and_cancels_are_audited(client, redis_client):
    import json
    import time

    from django.contrib.auth.models import Permission

    from gpulse import schema
    from gpulse.keys import Keys
    from tests.samples import sample

    user = get_user_model().objects.create_user("olga", password="pw-olga-123")
    user.user_permissions.add(Permission.objects.get(codename="launch_benchmark"))
    now = time.time()
    redis_client.set(Keys().node("n1"), schema.encode(sample("n1", ts=now, interval=60)))
    redis_client.hset(Keys().known_nodes, "n1", json.dumps({"ts": now, "interval": 60}))
    redis_client.set(Keys().worker("n1"), "{}", ex=60)  # its node worker's heartbeat: launches need one
    client.force_login(user)
    job_id = client.post("/api/v1/benchmarks", json.dumps({"nodes": ["n1"], "backend": "gloo"}),
                         content_type="application/json").json()["id"]
    client.post(f"/api/v1/benchmarks/{job_id}/cancel")
    actions = list(AuditEvent.objects.order_by("created").values_list("username", "action", "target"))
    assert actions == [("olga", "benchmark.launch", f"job {job_id}"), ("olga", "benchmark.cancel", f"job {job_id}")]


def test_rule_changes_mutes_and_faults_are_audited(client, redis_client):
    import json

    user = get_user_model().objects.create_superuser("root", password="pw-root-123")
    client.force_login(user)
    rule_id = client.post("/api/v1/rules", json.dumps({"name": "hot", "metric": "gpu.temp", "comparison": ">",
                                                       "threshold": 80, "for_seconds": 5}),
                          content_type="application/json").json()["id"]
    client.patch(f"/api/v1/rules/{rule_id}", json.dumps({"threshold": 90}), content_type="application/json")
    client.delete(f"/api/v1/rules/{rule_id}")
    client.post("/alerts/silences/", {"node_glob": "sim-01", "minutes": 30, "comment": "maintenance"})
    client.post("/api/v1/simulator/faults", json.dumps({"node": "sim-01", "gpu": 2, "fault": "hot"}),
                content_type="application/json")
    actions = list(AuditEvent.objects.order_by("created").values_list("action", "target"))
    assert actions[:3] == [("rule.create", f"rule {rule_id}"), ("rule.update", f"rule {rule_id}"),
                           ("rule.delete", f"rule {rule_id}")]
    assert ("simulator.fault", "sim-01/2") in actions
    assert any(action == "silence.create" for action, _ in actions)
