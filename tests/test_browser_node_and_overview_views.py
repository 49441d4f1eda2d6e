"""Issue 18's "missing where a person expects it", in a browser on the running system:
the node page's alerts, threshold lines, empty charts, custom range and zoom reset;
the overview's view kept in the URL and its faults first and outlined."""

import re
import time
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from devtools.loadtest.browser import VIEWPORT
from gpulse.keys import Keys
from tests.browser import OVERVIEW_DRAWN, log_in

pytestmark = pytest.mark.browser

RULE = "node page <b>hot</b>"  # markup in a name people choose: shown as text, never rendered
# What a chart (time-chart.js) shows in place of empty axes; null before it is drawn, "" while it has lines.
EMPTY_STATE = """id => {
  const chart = document.getElementById(id).timeChart;
  return chart.view ? (chart.empty.hidden ? "" : chart.empty.textContent) : null;
}"""
# A chart's thresholds (time-chart.js), each with whether its dashed line is painted in the plot: the
# canvas' pixel row at its value holds the threshold red, in dashes (red, then not, along the row).
THRESHOLDS = """([id, red]) => {
  const chart = document.getElementById(id).timeChart;
  if (!chart.uplot) return null;
  const u = chart.uplot, box = u.bbox, want = window.GpulseFormat.rgb(red);
  return chart.view.thresholds.map(t => {
    const y = Math.round(u.valToPos(t.value, "y", true));
    const row = u.ctx.getImageData(box.left, y, box.width, 1).data;
    const isRed = [];
    for (let o = 0; o < row.length; o += 4) isRed.push(want.every((c, k) => Math.abs(row[o + k] - c) <= 40));
    const reds = isRed.filter(Boolean).length;
    return {y: t.value, label: t.label, dashed: reds > box.width / 4 && reds < box.width * 0.9};
  });
}"""
RED = "#d1242f"
X_RANGE = "id => { const x = document.getElementById(id).timeChart.uplot.scales.x; return [x.min, x.max]; }"
# The fault outlines heatmap.js drew ([GPU, row] of each), and whether each cell painted holds both the
# outline's red and its white halo (antialiased edges aside: channels within 24 of the colour).
OUTLINES = """(red) => {
  const drawn = document.getElementById("heatmap").gpulseDrawn, canvas = document.querySelector("#heatmap .heat-cells");
  const w = canvas.width / drawn.z[0].length, h = canvas.height / drawn.z.length;
  const near = (data, hex) => {
    const want = window.GpulseFormat.rgb(hex);
    for (let o = 0; o < data.length; o += 4) if (want.every((c, k) => Math.abs(data[o + k] - c) <= 24)) return true;
    return false;
  };
  return drawn.faults.x.map((g, k) => {
    const p = drawn.faults.y[k];
    const data = canvas.getContext("2d")
      .getImageData(Math.floor(g * w), Math.floor(p * h), Math.ceil(w), Math.ceil(h)).data;
    return {cell: [g, p], red: near(data, red), halo: near(data, "#ffffff")};
  });
}"""
HEAT_LABELS = "() => Array.from(document.querySelectorAll('#heatmap .heat-row-label'), label => label.textContent)"
# Whether the heatmap's row ``p`` on screen shows its GPU 5 as lost.
LOST_SHOWN_AT = "(p => document.getElementById('heatmap').gpulseDrawn.text[p][5] === 'LOST')"


def manage_shell(system, code: str) -> None:
    system.stack.manage("shell", "-c", "from dashboard.alerts.models import Rule\n" + code)


def test_the_node_page_lists_its_firing_alert_marks_the_gpu_and_draws_the_threshold(admin_page, running_system):
    # Every GPU runs hotter than 1 °C: the rule fires on sim-03's GPU 2 at ingest's next tick.
    manage_shell(running_system, f"Rule.objects.create(name={RULE!r}, metric='gpu.temp', comparison='>', "
                                 "threshold=1, node_glob='sim-03', gpu_index=2)")
    page = admin_page
    try:
        row = page.locator("#node-alert-table tr.status-firing")
        deadline = time.monotonic() + 30
        while True:
            page.goto(f"{running_system.base_url}/nodes/sim-03/")
            if row.count() or time.monotonic() > deadline:
                break
            time.sleep(1)
        cells = [cell.strip() for cell in row.locator("td").all_text_contents()]
        assert cells[:4] == [RULE, "firing", "2", "GPU temperature above 1 °C"], cells
        assert page.get_attribute("#node-alerts a", "href") == "/alerts/"

        page.wait_for_selector("#gpu-table tbody tr:nth-child(8)")
        marked = page.locator("#gpu-table tbody tr.alerting")
        assert marked.count() == 1
        assert marked.locator("td").first.text_content() == "2 ALERT"

        for chart in ("live-temp", "hist-temp"):
            page.locator(f"#{chart}").scroll_into_view_if_needed()  # charts far off the screen wait (node.js)
            page.wait_for_function(f"() => ({THRESHOLDS})(['{chart}', '{RED}']) !== null")
            # The default rules' lines are there too; the name is drawn on the canvas as text, never markup.
            assert {"y": 1, "label": RULE + " (> 1), GPU 2", "dashed": True} in page.evaluate(THRESHOLDS, [chart, RED])
        # A temperature rule: only on the temperature charts.
        assert not any("node page" in t["label"] for t in page.evaluate(THRESHOLDS, ["live-util", RED]))
    finally:
        manage_shell(running_system, f"Rule.objects.filter(name={RULE!r}).delete()")
    page.reload()
    assert page.text_content("#node-alerts-none") == "No alerts firing or pending on this node."
    page.wait_for_selector("#gpu-table tbody tr:nth-child(8)")
    assert page.locator("#gpu-table tbody tr.alerting").count() == 0


def test_a_custom_range_comes_back_from_the_url_empty_and_zoom_resets(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/nodes/sim-01/")
    page.wait_for_function("() => document.getElementById('range-since').value !== ''")
    # A range three days back, before this system ran: no history in it.
    start = datetime.fromtimestamp(time.time() - 3 * 86400)  # the browser's zone is this process's
    since, until = (t.strftime("%Y-%m-%dT%H:%M") for t in (start, start + timedelta(hours=1)))
    page.fill("#range-since", since)
    page.fill("#range-until", until)
    with page.expect_navigation():
        page.click("#range-custom button[type=submit]")
    assert re.search(r"\?since=\d+&until=\d+$", page.url), page.url
    assert page.locator(".range-picker a.active").count() == 0

    for _ in range(2):  # as opened, then reloaded
        # The page draws one chart an animation frame, those near the screen (node.js inTurn): wait for the
        # last history chart.
        page.locator("#hist-power").scroll_into_view_if_needed()
        page.wait_for_function(f"() => ({EMPTY_STATE})('hist-power')")
        for chart in ("hist-util", "hist-mem", "hist-temp", "hist-power"):
            assert page.evaluate(EMPTY_STATE, chart) == "No history in this range yet"
        assert page.input_value("#range-since") == since and page.input_value("#range-until") == until
        page.reload()

    # The live charts have data: drag across one to zoom; every live chart follows, and the button resets them.
    # The reload kept the page scrolled to History, and a chart a screen away waits to be drawn until it is near.
    page.locator("#live-util").scroll_into_view_if_needed()
    page.wait_for_function("() => document.getElementById('live-util').timeChart.uplot")
    assert page.is_hidden("#live-reset-zoom")
    plot = page.locator("#live-util .u-over")

    def drag_to_zoom() -> None:
        for _ in range(3):  # a drag the once-a-second redraw cut short zooms nothing: drag again
            plot.scroll_into_view_if_needed()
            box = plot.bounding_box()
            page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2, steps=5)
            page.mouse.up()
            try:
                page.wait_for_selector("#live-reset-zoom:not([hidden])", timeout=3000)
                return
            except PlaywrightTimeout:
                continue
        raise AssertionError("three drags across the chart zoomed nothing")

    drag_to_zoom()
    # Each chart draws in a frame of its own: wait for the zoom to reach the last.
    page.wait_for_function(f"() => ({X_RANGE})('live-power')[1] - ({X_RANGE})('live-power')[0] < 0.5 * 900")
    zoomed = page.evaluate(X_RANGE, "live-util")
    assert zoomed[1] - zoomed[0] < 0.5 * 900  # about 30 % of the window: the drag's span
    page.wait_for_timeout(1500)  # the charts are redrawn every second: the zoom stays
    assert page.evaluate(X_RANGE, "live-util") == zoomed
    assert page.evaluate(X_RANGE, "live-temp") == zoomed
    page.click("#live-reset-zoom")
    assert page.is_hidden("#live-reset-zoom")
    page.wait_for_function(f"() => ({X_RANGE})('live-util')[0] !== {zoomed[0]!r}")
    start, end = page.evaluate(X_RANGE, "live-util")
    assert 899 <= end - start <= 901  # the 15-minute window again
    assert abs(end - time.time()) < 5

    # A double-click on a chart resets them as the button does.
    drag_to_zoom()
    page.wait_for_function(f"() => ({X_RANGE})('live-util')[1] - ({X_RANGE})('live-util')[0] < 0.5 * 900")
    plot.dblclick()
    page.wait_for_selector("#live-reset-zoom", state="hidden")
    page.wait_for_function(f"() => ({X_RANGE})('live-power')[1] - ({X_RANGE})('live-power')[0] >= 899")


def test_the_overview_keeps_its_colour_in_the_url(admin_page, chromium, running_system):
    page = admin_page
    page.goto(running_system.base_url + "/")
    page.wait_for_function("() => window.gpulse && window.gpulse.frames > 0")
    page.select_option("#heat-metric", "temp")
    page.fill("#node-filter", "sim-0")
    page.wait_for_url(running_system.base_url + "/?colour=temp&filter=sim-0")
    page.evaluate("localStorage.clear()")

    # Shared with someone else: a browser that never chose a colour.
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        other = context.new_page()
        other.set_default_timeout(15_000)
        log_in(other, running_system.base_url, running_system.username, running_system.password)
        other.goto(running_system.base_url + "/?colour=temp&filter=sim-0")
        other.wait_for_function("() => document.getElementById('heatmap').gpulseDrawn.z.length")
        assert other.input_value("#heat-metric") == "temp"
        assert other.input_value("#node-filter") == "sim-0"
        assert other.text_content("#scale-max") == "95 °C"
    finally:
        context.close()
    page.select_option("#heat-metric", "util")
    page.fill("#node-filter", "")
    page.wait_for_url(running_system.base_url + "/")


def test_problems_first_puts_a_lost_gpus_node_on_top_with_its_cell_outlined(admin_page, running_system):
    faults, key = running_system.redis(), Keys().simulator_faults
    page = admin_page
    page.goto(running_system.base_url + "/?order=problems")
    page.wait_for_function(OVERVIEW_DRAWN)
    assert page.input_value("#node-order") == "problems"
    try:
        faults.hset(key, "sim-03/5", "lost")
        # Waited for in the drawing the assertions read, not in the labels alone: once, in a full run, the
        # labels had sim-03 on top while the drawing held no outline (not reproduced since). Labels and
        # cells are drawn in one call, so only an error could part them: admin_page fails on any (it
        # found one here: the KPIs threw when ?order= asked for a drawing before the first snapshot).
        page.wait_for_function(f"() => ({HEAT_LABELS})()[0].startsWith('sim-03') && {LOST_SHOWN_AT}(0)")
        page.wait_for_function("() => document.querySelector('#node-table tbody tr').dataset.node === 'sim-03'")
        # A red square on a white halo, on the lost GPU only.
        assert page.evaluate(OUTLINES, RED) == [{"cell": [5, 0], "red": True, "halo": True}]

        page.select_option("#node-order", "name")
        page.wait_for_url(running_system.base_url + "/")
        page.wait_for_function(f"() => ({HEAT_LABELS})()[0] === 'sim-01' && {LOST_SHOWN_AT}(2)")
        assert page.evaluate(OUTLINES, RED) == [{"cell": [5, 2], "red": True, "halo": True}]
    finally:
        faults.delete(key)
    page.wait_for_function("() => document.getElementById('heatmap').gpulseDrawn.faults.x.length === 0", timeout=15_000)


def test_node_names_sort_as_people_read_them(admin_page, running_system):
    """Digits by their number (sim-2 before sim-10, sim-002 beside sim-2), letters case aside."""
    admin_page.goto(running_system.base_url + "/")
    names = ["sim-10", "sim-2", "SIM-3", "sim-002b", "gpu-B", "gpu-a", "gpu", "a10b2", "a10b10", "a9", "rack1-n20",
             "rack1-n3", "rack10-n1", "x"]
    assert admin_page.evaluate("names => names.slice().sort(window.GpulseFormat.compareNames)", names) == [
        "a9", "a10b2", "a10b10", "gpu", "gpu-a", "gpu-B", "rack1-n3", "rack1-n20", "rack10-n1", "sim-2", "sim-002b",
        "SIM-3", "sim-10", "x"]
