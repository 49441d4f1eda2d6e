"""The usage page and the overview's idle KPI in headless Chromium against the whole running system."""

import time

import orjson
import pytest

from collectors import simulated
from gpulse.keys import Keys
from tests.test_browser_health import ingest_held
from tests.test_browser_live import FRAMES, WATCH_REACT, each_in_a_frame_of_its_own

pytestmark = pytest.mark.browser

H100 = "NVIDIA H100 80GB HBM3"
IDLE_ROWS = """() => Array.from(document.querySelectorAll("#idle-table tbody tr")).map(
  tr => ({cells: Array.from(tr.cells).map(td => td.textContent), href: tr.querySelector("a").getAttribute("href")}))"""
CHART = """() => {
  const gd = document.getElementById("usage-chart");
  return {drawn: window.gpulseUsage.drawn, svg: !!gd.querySelector("svg.main-svg"),
          traces: (gd.data || []).map(t => t.name), plotlyLegend: !!gd.querySelector(".legend"),
          legend: Array.from(document.querySelectorAll("#usage-legend .legend-entry"), e => e.textContent)};
}"""


def test_the_usage_page_draws_its_chart_and_lists_an_idle_gpu_with_its_user_and_price(admin_page, running_system):
    client, keys = running_system.redis(), Keys()
    with ingest_held(running_system):
        kept = client.get(keys.idle_allocations)
        idle = {"node": "sim-02", "gpu": 5, "since": time.time() - (3 * 3600 + 12 * 60 + 20), "user": "erin",
                "job": "4711", "pod": "", "model": H100}
        client.set(keys.idle_allocations, orjson.dumps([idle]))
        try:
            admin_page.goto(running_system.base_url + "/usage/?since=24h")
            rows = admin_page.evaluate(IDLE_ROWS)
        finally:
            client.set(keys.idle_allocations, kept or b"[]")  # ingest writes it again only on a change
    assert rows == [{"cells": ["sim-02", "5", "erin", "4711", "—", H100, "3 h 12 min", "$2.50"],
                     "href": "/nodes/sim-02/"}]
    admin_page.wait_for_function(f"() => ({CHART})().drawn")
    chart = admin_page.evaluate(CHART)
    assert chart["svg"] and chart["traces"] == ["busy", "allocated", "GPUs reporting"]
    # Its key is HTML above it, not a Plotly legend (which made Plotly draw the axes twice; issue 18).
    assert chart["legend"] == chart["traces"] and not chart["plotlyLegend"]
    assert admin_page.get_attribute('a[href^="/usage/user.csv?since="]', "download") is not None
    assert admin_page.text_content(".range-picker a.active") == "24 h"


def test_the_usage_charts_first_drawing_takes_four_frames_and_ends_whole(admin_page, running_system):
    """Drawn in one task, the chart's first drawing took 54-169 ms at 2,000 GPUs (issue 18): its frame, its
    axes, its first line, then all of them, each in an animation frame of its own."""
    admin_page.add_init_script(FRAMES)
    admin_page.add_init_script(WATCH_REACT)
    admin_page.goto(running_system.base_url + "/usage/")
    admin_page.wait_for_function(f"() => ({CHART})().drawn")
    drawings = admin_page.evaluate("() => window.reactDrawings.filter(d => d.chart === 'usage-chart')")
    assert [d["traces"] for d in drawings] == [0, 0, 1, 3], drawings
    assert each_in_a_frame_of_its_own(drawings), drawings
    # As one drawing would leave it: three lines, the idle band shaded (allocated fills down to busy), both
    # axes, one hover for all lines.
    assert admin_page.evaluate("""() => {
      const gd = document.getElementById("usage-chart");
      return {lines: gd.data.map(t => [t.name, t.fill]), hovermode: gd._fullLayout.hovermode,
              axes: [gd._fullLayout.xaxis.visible, gd._fullLayout.yaxis.visible]};
    }""") == {"lines": [["busy", "none"], ["allocated", "tonexty"], ["GPUs reporting", "none"]],
              "hovermode": "x unified", "axes": [True, True]}


def test_the_overview_shows_the_gpus_allocated_but_idle_and_their_cost(admin_page, running_system):
    client, keys = running_system.redis(), Keys()
    with ingest_held(running_system):
        snapshot = orjson.loads(client.get(keys.snapshot))
        snapshot["summary"]["idle_allocated"] = {"gpus": 3, "usd_per_hour": 1234.5}
        client.set(keys.snapshot, orjson.dumps(snapshot))
        admin_page.goto(running_system.base_url + "/")
        admin_page.wait_for_function("() => document.getElementById('kpi-idle').textContent === '3 GPUs'")
        assert admin_page.text_content("#kpi-idle-cost") == "$1,234.50/h"
        assert admin_page.evaluate("() => [0, 0.5, 999.999, 1234567.891].map(v => window.GpulseFormat.usd(v))") == [
            "$0.00", "$0.50", "$1,000.00", "$1,234,567.89"]
        assert "status-stale" in admin_page.get_attribute("#kpi-idle", "class")
    with admin_page.expect_navigation():
        admin_page.click("#kpi-idle")
    assert admin_page.url.endswith("/usage/")


def test_the_usage_page_shows_the_forgotten_notebook_as_the_top_idle_allocation(admin_page, running_system):
    """Acceptance (issue 11): dana's notebook, idle since the fleet started, heads the list with its cost."""
    node = f"sim-{simulated.NOTEBOOK_NODE + 1:02d}"
    admin_page.goto(running_system.base_url + "/usage/")
    top = admin_page.evaluate(IDLE_ROWS)[0]
    assert top["cells"][:3] == [node, str(simulated.NOTEBOOK_GPU), simulated.NOTEBOOK_USER]
    assert top["cells"][5] == simulated.MODELS[simulated.NOTEBOOK_NODE].name
    assert top["cells"][7] == "$2.50"  # GPULSE_PRICE_GPU_HOUR: the system sets no price of its own
    assert top["href"] == f"/nodes/{node}/"
    # The overview's KPI counts it among the GPUs allocated but idle.
    admin_page.goto(running_system.base_url + "/")
    admin_page.wait_for_function("() => /^[1-9][0-9]* GPUs?$/.test(document.getElementById('kpi-idle').textContent)")
