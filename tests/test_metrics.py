"""/metrics: a real scrape of the running ASGI app, parsed with prometheus-client's parser."""

import json
import re
from pathlib import Path

import pytest

from dashboard.accounts.models import ApiToken
from dashboard.metrics import EXPORTED_NAMES
from gpulse.throttle import THROTTLE_REASONS
from tests.metrics_server import ODD_USER, TOKEN, scrape, series_of, serve_metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "grafana" / "gpulse-dashboard.json"


@pytest.fixture(scope="module")
def web(redis_server, tmp_path_factory):
    with serve_metrics(redis_server.url, tmp_path_factory.mktemp("metrics")) as url:
        yield url


@pytest.fixture(scope="module")
def scraped(web) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of one authorised scrape."""
    status, text = scrape(web)
    assert status == 200, text
    return series_of(text)


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
    assert scraped["gpulse_gpu_utilization_ratio"][n1_0] == 0.97
    assert scraped["gpulse_gpu_temperature_celsius"][n1_1] == 41
    assert scraped["gpulse_gpu_power_watts"][n1_0] == pytest.approx(612.4)
    assert scraped["gpulse_gpu_power_limit_watts"][n1_0] == 700.0
    assert scraped["gpulse_gpu_memory_used_bytes"][n1_0] == 40 * 1024**3
    assert scraped["gpulse_gpu_memory_total_bytes"][n1_0] == 85520809984
    assert scraped["gpulse_gpu_sm_clock_hertz"][n1_0] == 1980e6
    assert scraped["gpulse_gpu_pcie_rx_bytes_per_second"][n1_0] == 3.4e9
    assert scraped["gpulse_gpu_ecc_uncorrected_errors_total"][n1_0] == 0
    assert scraped["gpulse_gpu_fan_speed_ratio"] == {n1_0: 0.35}


def test_null_readings_are_left_out_not_zero(scraped):
    assert gpu_labels("n1", 1) not in scraped["gpulse_gpu_fan_speed_ratio"]
    assert gpu_labels("n1", 1) not in scraped["gpulse_gpu_ecc_uncorrected_errors_total"]
    assert "gpulse_gpu_nvlink_tx_bytes_per_second" not in scraped  # null on every GPU
    lost = gpu_labels("n2", 1)
    assert scraped["gpulse_gpu_lost"][lost] == 1 and scraped["gpulse_gpu_lost"][gpu_labels("n2", 0)] == 0
    assert lost not in scraped["gpulse_gpu_utilization_ratio"]
    assert not any(labels[:4] == lost for labels in scraped["gpulse_gpu_throttle_reason"])


def test_energy_is_a_counter_in_joules(scraped):
    assert scraped["gpulse_gpu_energy_joules_total"] == {gpu_labels("n1", 0): 48213775.401}  # from 48213775401 mJ


def test_allocation_and_busy_carry_the_owner_one_series_per_gpu(scraped):
    n1_0, n1_1 = gpu_labels("n1", 0, user="dana", job="41007"), gpu_labels("n1", 1, user="", job="")
    odd = gpu_labels("n2", 2, user=ODD_USER, job="")  # the parser read back what the exporter escaped
    assert scraped["gpulse_gpu_allocated"] == {n1_0: 1, n1_1: 0, gpu_labels("n2", 0, user="", job=""): 0, odd: 1}
    assert scraped["gpulse_gpu_busy"] == {n1_0: 1, n1_1: 0, gpu_labels("n2", 0, user="", job=""): 0, odd: 0}


def test_label_values_a_node_sends_are_escaped(web):
    text = scrape(web)[1]
    assert 'user="o\\"brien\\\\x\\ny"' in text


def test_throttle_reasons_are_one_hot(scraped):
    throttle = scraped["gpulse_gpu_throttle_reason"]
    reasons = {dict(labels)["reason"]: value for labels, value in throttle.items() if dict(labels)["node"] == "n1"
               and dict(labels)["gpu"] == "1"}
    assert reasons == {reason: (1 if reason == "sw_power_cap" else 0) for reason in THROTTLE_REASONS}


def test_only_nodes_that_are_up_export_gpu_gauges(scraped):
    nodes = {dict(labels)["node"] for labels in scraped["gpulse_gpu_utilization_ratio"]}
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
    assert scraped["gpulse_benchmark_last_busbw_bytes_per_second"] == {(("nodes", "n1,n2"),): 42.5e9}
    assert scraped["gpulse_alerts_firing"] == {(): 1}
    transitions = {dict(labels)["to"]: value for labels, value in scraped["gpulse_alert_transitions_total"].items()}
    assert transitions["pending"] == 1 and transitions["firing"] == 1 and transitions["resolved"] == 0


def test_node_health_is_exported_as_a_level_and_one_series_per_finding(scraped):
    assert scraped["gpulse_node_health"] == {(("node", "n1"),): 2.0, (("node", "n2"),): 0.0}  # no verdict: absent
    assert scraped["gpulse_health_check"] == {
        (("check", "nvlink_state"), ("gpu", "3"), ("node", "n1"), ("status", "fail")): 1.0,
        (("check", "pcie_link"), ("gpu", "0"), ("node", "n1"), ("status", "unknown")): 1.0,
    }


def test_everything_scraped_is_a_declared_name(scraped):
    assert set(scraped) <= EXPORTED_NAMES


def test_names_carry_base_units_as_prometheus_names_them():
    # promtool lints only the _total suffix; the naming guide also asks for
    # base units: ratios not percent, hertz not MHz, bytes not gigabytes.
    scaled = re.compile(r"_(percent|[kmg]hz|[kmgt]i?bytes|milliseconds|minutes|hours)(_|$)")
    assert [name for name in EXPORTED_NAMES if scaled.search(name)] == []
    counters = {name for name in EXPORTED_NAMES if name.endswith("_total")}
    assert "gpulse_gpu_ecc_uncorrected_errors_total" in counters


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
