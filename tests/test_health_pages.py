"""The health pages as the server renders them: who may see them, and what they hold."""

import json
import time

import pytest

from gpulse import schema
from gpulse.health import CHECKS
from gpulse.keys import Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db


def test_the_health_page_needs_login(client):
    response = client.get("/health/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_health_page_renders_its_live_list_for_any_user(viewer):
    response = viewer.get("/health/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="health-table"' in html and 'id="health-counts"' in html and 'id="health-empty"' in html
    # Live from the overview's frames: the same socket and cluster model, then the page's own script.
    scripts = ["socket.js", "cluster.js", "verdict.js", "health.js"]
    assert all(f"/static/gpulse/{name}" in html for name in scripts)
    assert html.index("verdict.js") < html.index("/health.js")


def test_every_page_links_to_the_health_page(viewer):
    html = viewer.get("/").content.decode()
    assert '<a href="/health/">Health</a>' in html


def test_the_overview_has_a_health_column_and_heatmap_mode(viewer):
    html = viewer.get("/").content.decode()
    assert '<option value="health">Health</option>' in html
    assert 'data-key="health"' in html
    # cluster.js reads each node's verdict with verdict.js: it must load first.
    assert html.index("verdict.js") < html.index("cluster.js")


def test_the_node_page_has_a_health_panel_naming_every_check(viewer, redis_client):
    now = time.time()
    redis_client.set(Keys().node("n1"), schema.encode(sample("n1", gpus=2, ts=now)))
    redis_client.hset(Keys().known_nodes, "n1", json.dumps({"ts": now, "interval": 1.0}))
    response = viewer.get("/nodes/n1/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="health-checks"' in html and 'id="health-history"' in html
    titles = json.loads(html.split('<script id="check-titles" type="application/json">')[1].split("</script>")[0])
    assert titles == {check.id: check.title for check in CHECKS}
    assert html.index("node-health.js") < html.index("/node.js")
