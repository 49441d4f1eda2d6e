"""The usage page and the overview's idle KPI in headless Chromium against the whole running system."""

import csv
import io
import time

import orjson
import pytest

from collectors import simulated
from gpulse.keys import Keys
from tests.fixtures_system import IDLE_MIN_SECONDS
from tests.test_browser_health import ingest_held

pytestmark = pytest.mark.browser

H100 = "NVIDIA H100 80GB HBM3"
IDLE_ROWS = """() => Array.from(document.querySelectorAll("#idle-table tbody tr")).map(
  tr => ({cells: Array.from(tr.cells).map(td => td.textContent), href: tr.querySelector("a").getAttribute("href")}))"""
# The usage chart (time-chart.js) is drawn (uPlot's, once its width is known) or says it has no data.
DRAWN_OR_EMPTY = """() => { const chart = document.getElementById("usage-chart").timeChart;
  return chart.uplot !== null || !chart.empty.hidden; }"""
# The usage chart (time-chart.js on uPlot): its lines, which is dotted, the bands it shades (the edges of each, by
# label, and whether its low edge is the busy line's values), and its key.
CHART = """() => {
  const u = document.getElementById("usage-chart").timeChart.uplot;
  if (!u) return null;
  const series = u.series.slice(1);
  const busy = JSON.stringify(u.data[u.series.findIndex(s => s.label === "busy")]);
  return {lines: series.filter(s => s.width > 0).map(s => s.label),
          dotted: series.filter(s => s.dash).map(s => s.label),
          bands: (u.bands || []).map(b => ({edges: b.series.map(i => u.series[i].label),
                                            lowIsBusy: JSON.stringify(u.data[b.series[1]]) === busy})),
          canvas: !!u.root.querySelector("canvas"),
          legend: Array.from(document.querySelectorAll("#usage-legend .legend-entry"), e => e.textContent)};
}"""


def test_the_usage_page_draws_its_chart_and_lists_an_idle_gpu_with_its_user_and_price(admin_page, running_system):
    client, keys = running_system.redis(), Keys()
    with ingest_held(running_system):
        kept = client.get(keys.idle_allocations)
        idle = {"node": "sim-02", "gpu": 5, "since": time.time() - (3 * 3600 + 12 * 60 + 20), "user": "erin",
                "job": "4711", "pod": "", "model": H100}
        # A training job's checkpoint: its GPU idle for a few seconds is not an idle allocation (issue 32).
        dip = {**idle, "gpu": 6, "since": time.time() - 3, "user": "frank", "job": "4712"}
        client.set(keys.idle_allocations, orjson.dumps([idle, dip]))
        try:
            admin_page.goto(running_system.base_url + "/usage/?since=24h")
            rows = admin_page.evaluate(IDLE_ROWS)
            summary = admin_page.text_content("#idle-summary") + " " + admin_page.text_content("#idle-minimum")
        finally:
            client.set(keys.idle_allocations, kept or b"[]")  # ingest writes it again only on a change
    # The H100 family's default price: the system sets none of its own.
    assert rows == [{"cells": ["sim-02", "5", "erin", "4711", "—", H100, "3 h 12 min", "$3.00"],
                     "href": "/nodes/sim-02/"}]
    assert summary == f"1 GPU, $3.00/h idle for {IDLE_MIN_SECONDS} s or more"
    # Ingest records usage each minute once it is over: a system just started has none for a minute or two.
    deadline = time.monotonic() + 180
    while True:
        admin_page.wait_for_function(DRAWN_OR_EMPTY)
        if admin_page.evaluate(f"() => ({CHART})() !== null") or time.monotonic() > deadline:
            break
        admin_page.wait_for_timeout(5000)
        admin_page.reload()
    chart = admin_page.evaluate(CHART)
    assert chart is not None, admin_page.text_content("#usage-chart")
    assert chart["canvas"] and chart["lines"] == ["busy", "allocated", "GPUs reporting"]
    # The GPUs held but idle: the band from busy up to allocated. The GPUs reporting dotted.
    assert chart["bands"] == [{"edges": ["allocated high", "allocated low"], "lowIsBusy": True}]
    assert chart["dotted"] == ["GPUs reporting"]
    # Its key is HTML above it.
    assert chart["legend"] == chart["lines"]
    assert admin_page.get_attribute('a[href^="/usage/user.csv?since="]', "download") is not None
    assert admin_page.text_content(".range-picker a.active") == "24 h"


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
    """Acceptance (issue 11): dana's notebook, idle since the fleet started, heads the list with its cost. The
    stalled loader that starts with the fleet (one or two GPUs) may share the head: where its SM activity is
    below GPULSE_BUSY_SM_ACTIVITY, it is idle since the fleet started too (issue 36)."""
    node = f"sim-{simulated.NOTEBOOK_NODE + 1:02d}"
    # Listed once idle IDLE_MIN_SECONDS (GPULSE_IDLE_MIN_SECONDS), which a session's first test may not have waited.
    listed = orjson.loads(running_system.redis().get(Keys().idle_allocations))
    since = min(entry["since"] for entry in listed if entry["user"] == simulated.NOTEBOOK_USER)
    time.sleep(max(0.0, since + IDLE_MIN_SECONDS + 1 - time.time()))
    admin_page.goto(running_system.base_url + "/usage/")
    head = admin_page.evaluate(IDLE_ROWS)[:3]
    notebook = [node, str(simulated.NOTEBOOK_GPU), simulated.NOTEBOOK_USER]
    top = next((row for row in head if row["cells"][:3] == notebook), None)
    assert top is not None, head
    for row in head[:head.index(top)]:  # ahead of it, only the stalled loader, by its command line
        sample = orjson.loads(running_system.redis().get(Keys().node(row["cells"][0])))
        commands = {process["cmd"] for process in sample["gpus"][int(row["cells"][1])]["processes"]}
        assert commands <= set(simulated.STALLED.commands), (row, commands)
    assert top["cells"][5] == simulated.MODELS[simulated.NOTEBOOK_NODE].name
    assert top["cells"][7] == "$3.00"  # the H100 family's default: the system sets no price of its own
    assert top["href"] == f"/nodes/{node}/"
    # The overview's KPI counts it among the GPUs allocated but idle.
    admin_page.goto(running_system.base_url + "/")
    admin_page.wait_for_function("() => /^[1-9][0-9]* GPUs?$/.test(document.getElementById('kpi-idle').textContent)")


# The By job table's job names in the page, and the <template>s still holding rows back.
JOB_TABLE = """() => ({
  jobs: Array.from(document.querySelectorAll("#usage-job tbody tr"), tr => tr.cells[0].textContent),
  waiting: document.querySelectorAll("#usage-job template").length})"""
LATER_JOBS = [f"later-{k:02d}" for k in range(40)]
# Job later-k held a GPU for k + 1 minutes two hours ago (an hour's sums, which the tables read): later-39 is
# the costliest of them.
CREATE_LATER_JOBS = (
    "import datetime as dt; from django.utils import timezone; from dashboard.live.models import UsageHour; "
    "hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=2); "
    "UsageHour.objects.bulk_create([UsageHour(hour=hour, node='later-rows', model='', user='lee', "
    "job=f'later-{k:02d}', pod='', samples=k + 1, seconds=60.0 * (k + 1), allocated_seconds=60.0 * (k + 1), "
    "busy_seconds=0.0, energy_j=0.0) for k in range(40)])"
)


def test_a_tables_rows_past_the_first_25_are_laid_out_after_the_page(admin_page, running_system):
    stack = running_system.stack
    stack.manage("shell", "-c", CREATE_LATER_JOBS)
    try:
        admin_page.goto(running_system.base_url + "/usage/?since=24h")
        served = admin_page.request.get(running_system.base_url + "/usage/?since=24h").text()
        table = served[served.index('id="usage-job"'):served.index("</table>", served.index('id="usage-job"'))]
        # As the page opens: 25 rows in the table (and the head's), the others held back in a <template>.
        assert "<template" in table and table[:table.index("<template")].count("<tr>") == 1 + 25
        admin_page.wait_for_function(f"() => ({JOB_TABLE})().waiting === 0")
        shown = admin_page.evaluate(JOB_TABLE)["jobs"]
        listed = admin_page.request.get(running_system.base_url + admin_page.get_attribute(
            'a[href^="/usage/job.csv?"]', "href")).text()
        # Every row the server chose, costliest first, once the page is idle.
        assert len(shown) == min(100, len(list(csv.reader(io.StringIO(listed)))) - 1) > 25
        assert [job for job in shown if job.startswith("later-")] == LATER_JOBS[::-1]
    finally:
        stack.manage("shell", "-c", "from dashboard.live.models import UsageHour; "
                     "UsageHour.objects.filter(node='later-rows').delete()")
