"""The benchmark pages load the Plotly.js that `make plotly-js` builds (vendor/plotly), of the version its
lockfile pins, and it holds every trace type they draw: a wrong bundle fails here rather than leaving a user's
chart blank. The other pages load no Plotly."""

import json
from pathlib import Path

import pytest

from dashboard.settings import PLOTLY_JS
from tests.browser import launch_finished_job

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
# The trace types each chart on the page was given (Plotly's default, scatter, where none is named), and
# the types the loaded bundle knows; Plotly would draw an unknown type as an invisible scatter, no error.
DRAWN = """() => ({
  drawn: Array.from(document.querySelectorAll(".js-plotly-plot"), gd => gd.data.map(t => t.type || "scatter")).flat(),
  known: Object.keys(Plotly.PlotSchema.get().traces),
  version: Plotly.version,
  src: document.querySelector('script[src*="/vendor/plotly/"]').getAttribute("src"),
})"""


@pytest.fixture(scope="module")
def plotly_pages(admin_context, running_system) -> dict[str, str]:
    """The pages with a Plotly chart, each with what says it is drawn (JS): a finished job's."""
    page = admin_context.new_page()
    page.set_default_timeout(15_000)
    try:
        job = launch_finished_job(page, running_system.base_url)
        assert page.text_content("#job-status").strip() == "succeeded", page.text_content("#job-reason")
    finally:
        page.close()
    return {job: "() => document.querySelector('#bandwidth-chart .scatterlayer .trace')"}


def open_drawn(page, url: str, ready: str) -> None:
    """Open ``url``, scroll past its chart grids (the node page draws only the charts near the screen) and
    wait for ``ready`` (JS)."""
    page.goto(url)
    for chart in page.locator(".chart-grid .chart").all():
        chart.scroll_into_view_if_needed()
    page.wait_for_function(ready)


def test_every_page_loads_the_pinned_partial_bundle_and_it_knows_each_trace_type_drawn(admin_page, running_system,
                                                                                      plotly_pages):
    lock = json.loads((ROOT / "vendor/plotly/package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/plotly.js"]["version"]
    drawn = set()
    for path, ready in plotly_pages.items():
        open_drawn(admin_page, running_system.base_url + path, ready)
        page = admin_page.evaluate(DRAWN)
        assert page["src"].endswith("/vendor/plotly/plotly-gpulse.min.js"), page["src"]
        assert page["version"] == pinned
        assert set(page["known"]) >= set(page["drawn"]), (path, set(page["drawn"]) - set(page["known"]))
        # Partial: only what the pages draw, none of the full bundle's other 40-odd types (bar, WebGL, 3D, maps).
        assert set(page["known"]) == {"scatter"}
        drawn |= set(page["drawn"])
    assert drawn == {"scatter"}
    served = admin_page.request.get(running_system.base_url + page["src"])
    assert served.ok and served.body() == PLOTLY_JS.read_bytes()


# An init script, run before the page's own: notes whether Plotly was already whole when vendor/plotly/index.js
# published its promise, which it does as its first stage has run.
WATCH_STAGES = """(() => {
  let promise;
  Object.defineProperty(window, "GpulsePlotly", {
    configurable: true,
    get: () => promise,
    set: (value) => { window.plotlyWholeAtFirstStage = window.Plotly !== undefined; promise = value; },
  });
})();"""


def test_plotly_loads_in_stages_and_every_chart_draws_once_it_has(admin_page, running_system, plotly_pages):
    """Evaluated in one task, Plotly held every page with a chart for 81-166 ms at 2,000 GPUs (issue 18): its
    modules run a stage a task, and the pages draw once the promise of it resolves."""
    # V8 compiles its functions as it streams the script, not one by one on the main thread (vendor/plotly/build.js).
    assert PLOTLY_JS.read_text().startswith("//# allFunctionsCalledOnLoad\n")
    admin_page.add_init_script(WATCH_STAGES)
    for path, ready in plotly_pages.items():
        open_drawn(admin_page, running_system.base_url + path, ready)
        assert admin_page.evaluate("() => window.plotlyWholeAtFirstStage") is False, path
        assert admin_page.evaluate("async () => (await window.GpulsePlotly) === window.Plotly"), path


NO_PLOTLY = """() => window.Plotly === undefined && window.GpulsePlotly === undefined
  && !document.querySelector('script[src*="/vendor/plotly/"]')"""


def test_the_overview_the_node_page_and_usage_draw_without_loading_plotly(admin_page, running_system):
    """The heatmap is a canvas (heatmap.js), the node page's and the usage page's charts are uPlot's
    (time-chart.js): none of them has a Plotly chart, so they load none of its 1 MB."""
    admin_page.goto(running_system.base_url + "/")
    admin_page.wait_for_function("() => window.gpulse && window.gpulse.frames > 0"
                                 " && document.getElementById('heatmap').gpulseDrawn.z.length")
    assert admin_page.evaluate(NO_PLOTLY)
    open_drawn(admin_page, running_system.base_url + "/nodes/sim-01/",
               "() => document.getElementById('live-util').timeChart.uplot"
               " && document.getElementById('hist-util').timeChart.view")
    assert admin_page.evaluate(NO_PLOTLY)
    open_drawn(admin_page, running_system.base_url + "/usage/",
               "() => document.getElementById('usage-chart').timeChart.view")
    assert admin_page.evaluate(NO_PLOTLY)
