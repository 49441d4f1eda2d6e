"""/metrics: a real scrape of the running ASGI app, parsed with prometheus-client's parser."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from dashboard.accounts.models import ApiToken
from dashboard.metrics import EXPORTED_NAMES
from devtools.redis_server import free_port
from gpulse import schema
from gpulse.keys import Keys
from gpulse.throttle import THROTTLE_REASONS
from tests.samples import gpu, sample

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "metrics-token-0123456789-abcdefghijklmnop"
DASHBOARD = ROOT / "grafana" / "gpulse-dashboard.json"

# Rows the scraped app finds in its database: what ingest, the control worker
# and the alert evaluator would have written.
SEED_DATABASE = """
import django, datetime as dt
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.utils import timezone
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.alerts.models import Alert, Rule, Transition, fingerprint
now = timezone.now()
job = dict(ranks_per_node=1, min_bytes=1024, max_bytes=1 << 20)
BenchmarkJob.objects.create(nodes=["n1", "n2"], status="succeeded", avg_busbw=10.0,
                            finished=now - dt.timedelta(hours=1), **job)
BenchmarkJob.objects.create(nodes=["n1", "n2"], status="succeeded", avg_busbw=42.5, finished=now, **job)
BenchmarkJob.objects.create(nodes=["n1"], status="succeeded", avg_busbw=None, finished=now, **job)
BenchmarkJob.objects.create(nodes=["n2"], status="failed", reason="rank 1 died", **job)
BenchmarkJob.objects.create(nodes=["n2"], status="running", **job)
rule = Rule.objects.create(name="metrics test: hot GPU", metric="gpu.temp", threshold=85)
alert = Alert.objects.create(fingerprint=fingerprint(rule.id, "n1", 0), rule=rule, node="n1", gpu=0,
                             status="firing", status_since=now)
Transition.objects.create(alert=alert, old="inactive", new="pending", reason="temp 90 > 85", created=now)
Transition.objects.create(alert=alert, old="pending", new="firing", reason="temp 90 > 85", created=now)
"""


def write_cluster(client: redis.Redis) -> None:
    """Write nodes as ingest and the collectors leave them: latest keys and the known-nodes hash."""
    keys = Keys()
    now = time.time()
    # A long interval keeps the statuses steady however slowly the test runs.
    interval = 60.0
    nodes = {
        # n1 GPU 1: no fan (null → not exported), throttled by the power cap.
        "n1": sample("n1", ts=now, interval=interval, gpus=0) | {"gpus": [
            gpu(0, util=97, temp=66, power=612.4, fan=35),
            gpu(1, util=12, temp=41, power=150.5, throttle=["sw_power_cap"], ecc_uncorrected=None),
        ]},
        # n2 GPU 1 fell off the bus: lost, every reading null.
        "n2": sample("n2", ts=now, interval=interval, gpus=0) | {"gpus": [
            gpu(0, util=50),
            {**gpu(1), **dict.fromkeys(schema.GPU_METRIC_NAMES), "lost": True, "throttle": None},
        ]},
        # Late by more than two intervals: stale, not yet down.
        "late": sample("late", ts=now - 2.5 * interval, interval=interval, gpus=2),
    }
    for name, node in nodes.items():
        client.set(keys.node(name), schema.encode(node), ex=600)
        client.hset(keys.known_nodes, name, json.dumps({"ts": node["ts"], "interval": node["interval"]}))
    # Its latest key expired long ago: down.
    client.hset(keys.known_nodes, "dead", json.dumps({"ts": now - 3600, "interval": interval}))


@pytest.fixture(scope="module")
def web(redis_server, tmp_path_factory):
    """The ASGI app under uvicorn, with a migrated SQLite database and a cluster in Redis."""
    state = tmp_path_factory.mktemp("metrics")
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPULSE_")}
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings", REDIS_URL=redis_server.url, PYTHONUNBUFFERED="1",
        DATABASE_URL=f"sqlite:///{state / 'db.sqlite3'}", GPULSE_METRICS_TOKEN=TOKEN,
    )
    subprocess.run([sys.executable, "-c", SEED_DATABASE], cwd=ROOT, env=env, check=True, timeout=120)
    port = free_port()
    log = open(state / "web.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "dashboard.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "off", "--no-access-log"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
            break
        except urllib.error.HTTPError:
            break  # 503: no ingest heartbeat, but the server answers
        except OSError:
            assert server.poll() is None, (state / "web.log").read_text()
            assert time.monotonic() < deadline, "uvicorn did not answer within 60 s"
            time.sleep(0.2)
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    write_cluster(client)
    yield url
    server.terminate()
    server.wait(10)
    log.close()
    client.flushdb()
    client.close()


def scrape(url: str, token: str | None = TOKEN) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def scraped(web) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of one authorised scrape."""
    status, text = scrape(web)
    assert status == 200, text
    series: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return series


def gpu_labels(node: str, index: int, **extra) -> tuple:
    labels = {"node": node, "gpu": str(index), "uuid": f"GPU-{index:08d}", "model": "NVIDIA H100 80GB HBM3", **extra}
    return tuple(sorted(labels.items()))


def test_scraping_needs_the_metrics_token(web):
    status, body = scrape(web, token=None)
    assert status == 401 and "Authorization: Bearer <GPULSE_METRICS_TOKEN>" in body
    assert scrape(web, token="wrong")[0] == 401
    assert scrape(web)[0] == 200


def test_gpu_gauges_carry_values_and_labels_in_schema_units(scraped):
    n1_0, n1_1 = gpu_labels("n1", 0), gpu_labels("n1", 1)
    assert scraped["gpulse_gpu_utilization_percent"][n1_0] == 97
    assert scraped["gpulse_gpu_temperature_celsius"][n1_1] == 41
    assert scraped["gpulse_gpu_power_watts"][n1_0] == pytest.approx(612.4)
    assert scraped["gpulse_gpu_power_limit_watts"][n1_0] == 700.0
    assert scraped["gpulse_gpu_memory_used_bytes"][n1_0] == 40 * 1024**3
    assert scraped["gpulse_gpu_memory_total_bytes"][n1_0] == 85520809984
    assert scraped["gpulse_gpu_sm_clock_mhz"][n1_0] == 1980
    assert scraped["gpulse_gpu_pcie_rx_bytes_per_second"][n1_0] == 3.4e9
    assert scraped["gpulse_gpu_ecc_uncorrected_errors"][n1_0] == 0
    assert scraped["gpulse_gpu_fan_speed_percent"] == {n1_0: 35}


def test_null_readings_are_left_out_not_zero(scraped):
    assert gpu_labels("n1", 1) not in scraped["gpulse_gpu_fan_speed_percent"]
    assert gpu_labels("n1", 1) not in scraped["gpulse_gpu_ecc_uncorrected_errors"]
    assert "gpulse_gpu_nvlink_tx_bytes_per_second" not in scraped  # null on every GPU
    lost = gpu_labels("n2", 1)
    assert scraped["gpulse_gpu_lost"][lost] == 1 and scraped["gpulse_gpu_lost"][gpu_labels("n2", 0)] == 0
    assert lost not in scraped["gpulse_gpu_utilization_percent"]
    assert not any(labels[:4] == lost for labels in scraped["gpulse_gpu_throttle_reason"])


def test_throttle_reasons_are_one_hot(scraped):
    throttle = scraped["gpulse_gpu_throttle_reason"]
    reasons = {dict(labels)["reason"]: value for labels, value in throttle.items() if dict(labels)["node"] == "n1"
               and dict(labels)["gpu"] == "1"}
    assert reasons == {reason: (1 if reason == "sw_power_cap" else 0) for reason in THROTTLE_REASONS}


def test_only_nodes_that_are_up_export_gpu_gauges(scraped):
    nodes = {dict(labels)["node"] for labels in scraped["gpulse_gpu_utilization_percent"]}
    assert nodes == {"n1", "n2"}
    assert scraped["gpulse_node_up"] == {
        (("node", "n1"),): 1, (("node", "n2"),): 1, (("node", "late"),): 0, (("node", "dead"),): 0,
    }
    status = {dict(labels)["node"]: dict(labels)["status"] for labels, v in scraped["gpulse_node_status"].items() if v}
    assert status == {"n1": "up", "n2": "up", "late": "stale", "dead": "down"}
    assert len(scraped["gpulse_node_status"]) == 4 * 3  # one-hot over up/stale/down


def test_job_and_alert_counts(scraped):
    jobs = {dict(labels)["status"]: value for labels, value in scraped["gpulse_benchmark_jobs"].items()}
    assert jobs == {"queued": 0, "running": 1, "succeeded": 3, "failed": 1, "cancelled": 0, "timed_out": 0}
    # The latest successful job of each node set; a job without a figure is skipped.
    assert scraped["gpulse_benchmark_last_busbw_gbytes_per_second"] == {(("nodes", "n1,n2"),): 42.5}
    assert scraped["gpulse_alerts_firing"] == {(): 1}
    transitions = {dict(labels)["to"]: value for labels, value in scraped["gpulse_alert_transitions_total"].items()}
    assert transitions["pending"] == 1 and transitions["firing"] == 1 and transitions["resolved"] == 0


def test_everything_scraped_is_a_declared_name(scraped):
    assert set(scraped) <= EXPORTED_NAMES


@pytest.mark.django_db
def test_without_a_metrics_token_a_session_or_api_token_is_needed(client, settings, viewer_user):
    settings.GPULSE_METRICS_TOKEN = ""
    response = client.get("/metrics")
    assert response.status_code == 401 and b"a session or API token" in response.content
    token = ApiToken.issue(viewer_user)
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200 and b"gpulse_alerts_firing 0.0" in response.content
    client.force_login(viewer_user)
    assert client.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_a_set_metrics_token_still_lets_a_logged_in_user_look(client, settings, viewer_user):
    settings.GPULSE_METRICS_TOKEN = TOKEN
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get("/metrics").status_code == 401
    client.force_login(viewer_user)
    assert client.get("/metrics").status_code == 200


def promql_exprs(dashboard: dict) -> list[str]:
    exprs = []
    for panel in dashboard["panels"]:
        exprs += [target["expr"] for target in panel.get("targets", [])]
        for inner in panel.get("panels", []):
            exprs += [target["expr"] for target in inner.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def test_the_grafana_dashboard_queries_only_series_that_metrics_exports():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = promql_exprs(dashboard)
    assert len(exprs) >= 8
    used = {name for expr in exprs for name in re.findall(r"\bgpulse_[a-z0-9_]+", expr)}
    assert used and used <= EXPORTED_NAMES, used - EXPORTED_NAMES
    # Every panel reads the Prometheus data source the user picks on import.
    datasources = {json.dumps(panel.get("datasource")) for panel in dashboard["panels"] if panel.get("targets")}
    assert datasources == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}
