"""JSON API: rules, webhooks, silences, alerts and simulator faults; 201/400/401/403."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from collectors.health_checks import HealthChecks
from collectors.simulated import SimulatedFleet, parse_fault, redis_fault_reader
from dashboard.accounts.models import ApiToken
from dashboard.alerts.models import Rule, Silence, WebhookEndpoint
from gpulse.faults import FAULTS, NODE_FAULTS
from gpulse.keys import Keys

pytestmark = pytest.mark.django_db

RULE = {"name": "Hot GPU", "metric": "gpu.temp", "comparison": ">", "threshold": 85, "for_seconds": 5}
HOOK = {"name": "ops", "url": "https://hooks.example.com/gpulse", "format": "alertmanager"}


def post(client, url, data, **extra):
    return client.post(url, data=json.dumps(data), content_type="application/json", **extra)


def patch(client, url, data):
    return client.patch(url, data=json.dumps(data), content_type="application/json")


def test_it_creates_reads_updates_and_deletes_a_rule(operator):
    created = post(operator, "/api/v1/rules", RULE)
    assert created.status_code == 201
    rule_id = created.json()["id"]
    assert Rule.objects.get(id=rule_id).enabled  # model default when the field is left out
    got = operator.get(f"/api/v1/rules/{rule_id}").json()
    assert got["threshold"] == 85 and got["repeat_interval"] == 4 * 3600 and got["gpu_index"] is None
    assert any(r["name"] == "Hot GPU" for r in operator.get("/api/v1/rules").json()["results"])
    updated = patch(operator, f"/api/v1/rules/{rule_id}", {"threshold": 90, "gpu_index": 2})
    assert updated.status_code == 200 and updated.json()["threshold"] == 90 and updated.json()["name"] == "Hot GPU"
    assert operator.delete(f"/api/v1/rules/{rule_id}").status_code == 204
    assert not Rule.objects.filter(id=rule_id).exists()
    missing = operator.get(f"/api/v1/rules/{rule_id}")
    assert missing.status_code == 404 and missing.json()["error"] == f"no rule with id {rule_id}"


@pytest.mark.parametrize(
    "metric", ["node.health", "gpu.pcie_degraded", "gpu.row_remap_pending", "gpu.nvlink_down", "ib.port_down"])
def test_a_rule_can_watch_each_health_metric(operator, metric):
    created = post(operator, "/api/v1/rules", {**RULE, "name": metric, "metric": metric, "threshold": 1})
    assert created.status_code == 201 and Rule.objects.get(id=created.json()["id"]).metric == metric


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": ""}, "name: This field is required."),
        ({"metric": "gpu.smell"}, "metric: Select a valid choice."),
        ({"metric": "gpu.throttle"}, "throttle_reason: gpu.throttle needs the throttle reason to watch"),
        ({"metric": "node.down", "gpu_index": 0}, "gpu_index: node.down is a node-level metric"),
        ({"metric": "node.health", "gpu_index": 0}, "gpu_index: node.health is a node-level metric"),
        ({"metric": "ib.port_down", "gpu_index": 0}, "gpu_index: ib.port_down is a node-level metric"),
        ({"comparison": "=~"}, "comparison: Select a valid choice."),
        ({"for_seconds": -1}, "for_seconds: Ensure this value is greater than or equal to 0."),
        ({"repeat_interval": 5}, "repeat_interval: at least 60 seconds"),
        ({"node_glob": "gpu 01; rm"}, "node_glob: use a node name or a glob"),
        ({"colour": "red"}, "colour: unknown field"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field(admin, change, message):
    response = post(admin, "/api/v1/rules", {**RULE, **change})
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert not Rule.objects.filter(name=RULE["name"]).exists()


def test_a_body_that_is_not_json_is_a_400(admin):
    response = admin.post("/api/v1/rules", data="{nope", content_type="application/json")
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]


def test_without_the_permission_writes_are_403_and_reads_are_allowed(viewer, operator):
    assert post(viewer, "/api/v1/rules", RULE).status_code == 403
    assert viewer.get("/api/v1/rules").status_code == 200
    rule = Rule.objects.get(name="GPU temperature high")
    response = patch(viewer, f"/api/v1/rules/{rule.id}", {"threshold": 1})
    assert response.status_code == 403 and "alerts.change_rule" in response.json()["error"]
    assert viewer.delete(f"/api/v1/rules/{rule.id}").status_code == 403
    # Rules permission does not reach webhooks.
    assert post(operator, "/api/v1/webhooks", HOOK).status_code == 403
    assert operator.get("/api/v1/webhooks").status_code == 403


def test_anonymous_requests_are_401():
    assert Client().get("/api/v1/rules").status_code == 401
    assert post(Client(), "/api/v1/rules", RULE).status_code == 401


def test_session_posts_need_the_csrf_token_but_bearer_posts_do_not(admin_user):
    session = Client(enforce_csrf_checks=True)
    session.force_login(admin_user)
    assert post(session, "/api/v1/rules", RULE).status_code == 403
    token = ApiToken.issue(admin_user)
    bearer = Client(enforce_csrf_checks=True)
    assert post(bearer, "/api/v1/rules", RULE, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 201


def test_it_creates_a_webhook_and_never_returns_its_secret(admin):
    created = post(admin, "/api/v1/webhooks", HOOK)
    assert created.status_code == 201
    body = created.json()
    endpoint = WebhookEndpoint.objects.get(id=body["id"])
    assert body["secret"] == endpoint.secret and len(endpoint.secret) >= 32  # generated, shown once
    listed = admin.get("/api/v1/webhooks").json()["results"]
    assert listed == [
        {"id": endpoint.id, "name": "ops", "url": HOOK["url"], "format": "alertmanager", "enabled": True,
         "min_severity": "info"}
    ]
    updated = patch(admin, f"/api/v1/webhooks/{endpoint.id}", {"enabled": False})
    assert updated.status_code == 200 and "secret" not in updated.json()
    endpoint.refresh_from_db()
    assert endpoint.secret == body["secret"] and not endpoint.enabled
    patch(admin, f"/api/v1/webhooks/{endpoint.id}", {"secret": "chosen-by-me"})
    endpoint.refresh_from_db()
    assert endpoint.secret == "chosen-by-me"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"url": "ftp://example.com/x"}, "url: use an http:// or https:// URL"),
        ({"url": "http://"}, "url: not a valid URL: it needs a host name"),
        ({"url": "http://host:99999/"}, "url: not a valid URL"),
        ({"url": ""}, "url: This field is required."),
        ({"format": "xml"}, "format: Select a valid choice."),
        ({"min_severity": "urgent"}, "min_severity: Select a valid choice."),
    ],
)
def test_a_bad_webhook_is_a_400_naming_the_field(admin, change, message):
    response = post(admin, "/api/v1/webhooks", {**HOOK, **change})
    assert response.status_code == 400 and response.json()["error"].startswith(message)


@pytest.mark.parametrize(
    "url, address",
    [
        ("http://127.0.0.1:9093/hook", "127.0.0.1 is a loopback address"),
        ("http://localhost:9093/hook", "localhost resolves to "),
        ("http://169.254.169.254/latest", "169.254.169.254 is a link-local address"),
        ("https://[::ffff:10.0.0.1]/hook", "::ffff:10.0.0.1 is a private address"),
    ],
)
def test_a_private_webhook_target_is_refused_at_creation_naming_the_settings(admin, settings, url, address):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    response = post(admin, "/api/v1/webhooks", {**HOOK, "url": url})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith(f"url: refused: {address}")
    assert "GPULSE_WEBHOOK_ALLOW_PRIVATE=true" in error and "GPULSE_WEBHOOK_ALLOWED_NETWORKS" in error
    assert not WebhookEndpoint.objects.exists()


def test_a_private_webhook_target_is_accepted_once_its_network_is_allowed(admin, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    settings.GPULSE_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    assert post(admin, "/api/v1/webhooks", {**HOOK, "url": "http://127.0.0.1:9093/hook"}).status_code == 201
    settings.GPULSE_WEBHOOK_ALLOWED_NETWORKS = []
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    assert post(admin, "/api/v1/webhooks", {**HOOK, "name": "b", "url": "http://10.1.2.3/hook"}).status_code == 201


def test_a_webhook_host_that_does_not_resolve_is_accepted(admin, settings):
    # Delivery resolves and checks it again; the web server's DNS may not see what the workers' does.
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = False
    created = post(admin, "/api/v1/webhooks", {**HOOK, "url": "https://no-such-host.invalid/hook"})
    assert created.status_code == 201


def test_silences_and_the_alert_list(admin):
    rule = Rule.objects.get(name="GPU lost")
    created = post(
        admin, "/api/v1/silences", {"rule": rule.id, "node_glob": "gpu-0*", "minutes": 30, "comment": "maintenance"}
    )
    assert created.status_code == 201
    silence = Silence.objects.get(id=created.json()["id"])
    assert silence.created_by == "admin" and silence.matches(rule.id, "gpu-07", 3)
    empty = post(admin, "/api/v1/silences", {"minutes": 30})
    assert empty.status_code == 400 and empty.json()["error"].startswith("request: name a rule, a node")
    assert admin.get("/api/v1/alerts").json() == {"firing": 0, "alerts": []}


@pytest.fixture
def faults(redis_client):
    """The fault hash, read back; sim-01 and sim-02 are nodes the cluster has seen."""
    keys = Keys()
    for name in ("sim-01", "sim-02"):
        redis_client.hset(keys.known_nodes, name, json.dumps({"ts": 1.0, "interval": 1.0}))
    return lambda: {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.simulator_faults).items()}


def test_staff_inject_and_clear_simulator_faults(admin, faults):
    assert post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": 3, "fault": "hot"}).status_code == 200
    post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": 5, "fault": "xid:79"})
    post(admin, "/api/v1/simulator/faults", {"node": "sim-02", "gpu": None, "fault": "dead"})
    assert faults() == {"sim-01/3": "hot", "sim-01/5": "xid:79", "sim-02": "dead"}
    post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": 5, "fault": "clear"})
    assert faults() == {"sim-01/3": "hot", "sim-02": "dead"}
    cleared = post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "fault": "clear"})
    assert cleared.json()["fields"] == ["sim-01", "sim-01/3"]
    assert faults() == {"sim-02": "dead"}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"node": "sim-01", "fault": "melt"}, "fault: one of hot, xid"),
        ({"node": "sim-01", "gpu": 2, "fault": "dead"}, "gpu: 'dead' is a fault of a whole node"),
        ({"node": "sim-01", "gpu": 2, "fault": "ib_down"}, "gpu: 'ib_down' is a fault of a whole node"),
        ({"node": "a/b", "fault": "hot"}, "node: a node name, without /"),
        ({"node": "sim-01", "gpu": -1, "fault": "hot"}, "gpu: Ensure this value is greater than or equal to 0."),
    ],
)
def test_a_bad_fault_is_a_400(admin, faults, body, message):
    response = post(admin, "/api/v1/simulator/faults", body)
    assert response.status_code == 400 and response.json()["error"].startswith(message)
    assert faults() == {}


def test_a_fault_on_a_node_the_cluster_never_saw_is_a_400_naming_it(admin, faults):
    response = post(admin, "/api/v1/simulator/faults", {"node": "sim-99", "gpu": 0, "fault": "hot"})
    assert response.status_code == 400
    assert response.json()["error"] == "node: the cluster has never seen a node named 'sim-99'"
    assert faults() == {}


def test_faults_left_on_a_forgotten_node_can_still_be_cleared(admin, faults, redis_client):
    redis_client.hset(Keys().simulator_faults, "gone-01/2", "hot")
    cleared = post(admin, "/api/v1/simulator/faults", {"node": "gone-01", "fault": "clear"})
    assert cleared.status_code == 200 and cleared.json()["fields"] == ["gone-01", "gone-01/2"]
    assert faults() == {}


@pytest.mark.parametrize("fault", [*FAULTS, "xid:79", "XID:13"])
def test_every_fault_the_collector_knows_can_be_injected(admin, faults, fault):
    gpu = None if fault in NODE_FAULTS else 1
    response = post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": gpu, "fault": fault})
    assert response.status_code == 200, response.json()
    stored = faults().get("sim-01" if gpu is None else "sim-01/1")
    assert stored is None if fault == "clear" else parse_fault(stored) == parse_fault(fault)


def test_nvlink_down_from_the_api_fails_that_nodes_nvlink_check_until_cleared(admin, faults, redis_client):
    fleet = SimulatedFleet(2, 8, 1.0, seed=4, fault_reader=redis_fault_reader(redis_client, Keys()))
    checks = HealthChecks()

    def findings() -> dict[str, list[tuple]]:
        result = {}
        for sample in fleet.sample():
            checks.annotate(sample, sample["ts"])
            result[sample["node"]] = [(f["check"], f["gpu"], f["status"]) for f in sample["health"]["findings"]]
        return result

    assert findings() == {"sim-01": [], "sim-02": []}
    post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": 3, "fault": "nvlink_down"})
    assert findings() == {"sim-01": [("nvlink_state", 3, "fail")], "sim-02": []}
    post(admin, "/api/v1/simulator/faults", {"node": "sim-01", "fault": "clear"})
    assert findings() == {"sim-01": [], "sim-02": []}


def test_faults_are_for_staff_only(operator, faults):
    response = post(operator, "/api/v1/simulator/faults", {"node": "sim-01", "gpu": 0, "fault": "hot"})
    assert response.status_code == 403
    assert faults() == {}


def test_without_the_permission_an_id_is_403_whether_it_exists_or_not(viewer, operator):
    endpoint = WebhookEndpoint.objects.create(name="ops", url=HOOK["url"])
    rule = Rule.objects.get(name="GPU lost")
    silence = Silence.objects.create(node_glob="gpu-01", until=timezone.now() + timedelta(hours=1))
    for existing, path in ((endpoint.id, "webhooks"), (rule.id, "rules"), (silence.id, "silences")):
        for pk in (existing, existing + 1000):
            url = f"/api/v1/{path}/{pk}"
            assert patch(viewer, url, {"comment": "x"}).status_code == 403, url
            assert viewer.delete(url).status_code == 403, url
    for pk in (endpoint.id, endpoint.id + 1000):
        assert viewer.get(f"/api/v1/webhooks/{pk}").status_code == 403
        assert operator.get(f"/api/v1/webhooks/{pk}").status_code == 403
