"""/metrics as real Prometheus tools see it: Debian's prometheus scrapes a live
gpulse web server, promtool lints the exposition and checks and unit-tests the
DCGM compatibility recording rules. `make test` installs the package
(`make system-packages`); without it these tests skip and say so."""

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from dashboard.metrics import EXPORTED_NAMES
from devtools.redis_server import free_port
from tests.metrics_server import TOKEN, scrape, serve_metrics

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "gpulse-dcgm-compat.rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "gpulse-dcgm-compat.test.yml"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: run `make system-packages`")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None,
                                      reason="prometheus not installed: run `make system-packages`")


@pytest.fixture(scope="module")
def web(redis_server, tmp_path_factory):
    with serve_metrics(redis_server.url, tmp_path_factory.mktemp("prometheus-web")) as url:
        yield url


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60)


def api(base: str, path: str, **query) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


@pytest.fixture(scope="module")
def prometheus(web, tmp_path_factory):
    """A real prometheus scraping `web` every second with the metrics token, the compat rules loaded."""
    state = tmp_path_factory.mktemp("prometheus")
    target = urllib.parse.urlsplit(web)
    config = state / "prometheus.yml"
    (state / "token").write_text(TOKEN)
    config.write_text(json.dumps({  # JSON is YAML: no YAML writer needed
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{
            "job_name": "gpulse",
            "metrics_path": target.path,
            "authorization": {"type": "Bearer", "credentials_file": str(state / "token")},
            "static_configs": [{"targets": [target.netloc]}],
        }],
    }))
    port = free_port()
    log = open(state / "prometheus.log", "wb")
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={state / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (state / "prometheus.log").read_text()
            try:
                targets = api(base, "targets")["activeTargets"]
                if targets and targets[0]["health"] != "unknown" and api(base, "query", query="DCGM_FI_DEV_GPU_UTIL")[
                        "result"]:
                    break  # scraped, and the rules evaluated on what it scraped
            except OSError:
                pass
            assert time.monotonic() < deadline, (state / "prometheus.log").read_text()
            time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        server.wait(20)
        log.close()


@needs_prometheus
def test_prometheus_scrapes_metrics_with_the_token_and_no_error(prometheus):
    [target] = api(prometheus, "targets")["activeTargets"]
    assert (target["health"], target["lastError"]) == ("up", "")
    assert target["scrapeUrl"].endswith("/metrics")


@needs_prometheus
def test_prometheus_stores_the_base_unit_series(prometheus):
    series = {(s["metric"]["node"], s["metric"]["gpu"]): float(s["value"][1])
              for s in api(prometheus, "query", query="gpulse_gpu_utilization_ratio")["result"]}
    assert series == {("n1", "0"): 0.97, ("n1", "1"): 0.12, ("n2", "0"): 0.5, ("n2", "2"): 0.02}
    [ecc] = api(prometheus, "metadata", metric="gpulse_gpu_ecc_uncorrected_errors")["gpulse_gpu_ecc_uncorrected_errors"]
    assert ecc["type"] == "counter"
    [energy] = api(prometheus, "metadata", metric="gpulse_gpu_energy_joules")["gpulse_gpu_energy_joules"]
    assert energy["type"] == "counter"


@needs_prometheus
def test_the_compat_rules_give_the_dcgm_names_units_and_labels(prometheus):
    [util] = [s for s in api(prometheus, "query", query='DCGM_FI_DEV_GPU_UTIL{Hostname="n1", gpu="0"}')["result"]]
    assert float(util["value"][1]) == 97
    assert util["metric"]["UUID"] == "GPU-00000000" and util["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
    [clock] = api(prometheus, "query", query='DCGM_FI_DEV_SM_CLOCK{Hostname="n1", gpu="0"}')["result"]
    assert float(clock["value"][1]) == 1980  # MHz, as dcgm-exporter
    [used] = api(prometheus, "query", query='DCGM_FI_DEV_FB_USED{Hostname="n1", gpu="0"}')["result"]
    assert float(used["value"][1]) == 40 * 1024  # MiB
    # The community dashboard's template variable query.
    hosts = api(prometheus, "label/Hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
    assert hosts == ["n1", "n2"]


@needs_promtool
def test_promtool_check_metrics_finds_nothing_to_lint(web):
    status, text = scrape(web)
    assert status == 200
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", checked


@needs_promtool
def test_promtool_accepts_the_compat_rules():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "WARNING" not in checked.stdout + checked.stderr


@needs_promtool
def test_the_compat_rules_unit_tests_pass():
    tested = promtool("test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_compat_rules_read_only_series_that_metrics_exports():
    used = set(re.findall(r"\bgpulse_[a-z0-9_]+", RULES.read_text()))
    assert used and used <= EXPORTED_NAMES, used - EXPORTED_NAMES
