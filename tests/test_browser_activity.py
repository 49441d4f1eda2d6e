"""SM activity on the pages (issue 36): the overview heatmap's "SM activity" colour mode, where a GPU that does
not report it is no data (hatched), never 0, and the node page's activity charts. Real samples through a real
ingest to Chromium; the node is fed by a thread standing in for its collector."""

import pytest

from tests.browser import CELL_COLOUR, CELL_POSITION, HATCH_COLOURS
from tests.feeder import feeding
from tests.samples import sample
from tests.test_browser_overview_behaviour import small_page, small_system  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

NODE = "act-01"
# GPU 0 training flat out, GPU 1 the stalled loader (kernels run, SMs idle), GPU 2 without GPM.
UTIL = [97, 100, 80]
SM_ACTIVE = [1.0, 0.0, None]
TENSOR_ACTIVE = [0.5, 0.0, None]
# The activity scale's ends (heatmap.js SCALES.activity).
ACTIVITY_LOW, ACTIVITY_HIGH = "#fff5eb", "#7f2704"

ROW = """(name) => {
  const drawn = document.getElementById("heatmap").gpulseDrawn;
  const r = Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent)
    .findIndex(t => t.startsWith(name));
  // null until the cells are drawn too: a new node's label can be on the page a frame before its row is.
  return r < 0 || !drawn.z[r] ? null : {r: r, z: drawn.z[r], range: [drawn.zmin, drawn.zmax],
    min: document.getElementById("scale-min").textContent, max: document.getElementById("scale-max").textContent};
}"""
# The colours painted over a heatmap cell's top left quarter, 6 x 6 pixels apart (the hatch is stripes).
CELL_COLOURS = """([row, gpu]) => {
  const canvas = document.querySelector("#heatmap .heat-cells"), drawn = document.getElementById("heatmap").gpulseDrawn;
  const w = canvas.width / drawn.z[0].length, h = canvas.height / drawn.z.length, seen = new Set();
  for (let dx = 0.1; dx < 0.5; dx += 0.08) for (let dy = 0.1; dy < 0.5; dy += 0.08) {
    const x = Math.floor((gpu + dx) * w), y = Math.floor((row + dy) * h);
    const pixel = canvas.getContext("2d").getImageData(x, y, 1, 1).data;
    seen.add("#" + Array.from(pixel.slice(0, 3), c => c.toString(16).padStart(2, "0")).join(""));
  }
  return Array.from(seen);
}"""
# Per GPU line of a live chart, its values that are not null.
CHART_VALUES = """(id) => {
  const u = document.getElementById(id).timeChart.uplot;
  return u ? u.data.slice(1).map(y => y.filter(v => v !== null)) : null;
}"""


def activity_sample() -> dict:
    s = sample(NODE, gpus=3)
    for g, reading in enumerate(s["gpus"]):
        reading.update(util=UTIL[g], sm_active=SM_ACTIVE[g], tensor_active=TENSOR_ACTIVE[g],
                       dram_active=None if SM_ACTIVE[g] is None else 0.25)
    return s


@pytest.fixture(scope="module")
def fed(small_system):  # noqa: F811
    """NODE's collector, in a system of the module's own (its node must not show up in the shared system's
    pages): a sample a second, until the module is done."""
    with feeding(small_system.redis_url, NODE, activity_sample):
        yield small_system


def test_the_activity_mode_colours_each_gpu_by_its_sm_activity_and_one_without_it_as_no_data(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + "/")
    assert small_page.is_hidden("#activity-legend")
    small_page.select_option("#heat-metric", "activity")
    small_page.wait_for_function(f"() => {{ const a = ({ROW})('{NODE}'); return a && a.z[0] === 100; }}")
    row = small_page.evaluate(ROW, NODE)
    assert row["z"] == [100, 0, None] and row["range"] == [0, 100]
    assert (row["min"], row["max"]) == ("0 %", "100 %")
    colours = [small_page.evaluate(CELL_COLOUR, [row["r"], g]) for g in range(2)]
    assert colours == [ACTIVITY_HIGH, ACTIVITY_LOW]  # busy SMs dark, the stalled loader's pale at 100 % util
    hatch = set(small_page.evaluate(CELL_COLOURS, [row["r"], 2]))
    assert hatch & HATCH_COLOURS and ACTIVITY_LOW not in hatch, hatch  # not reported: no data, not 0's colour
    assert small_page.is_visible("#activity-legend")
    centre = small_page.evaluate(CELL_POSITION, [row["r"], 2])
    small_page.mouse.move(centre["x"], centre["y"])
    small_page.wait_for_selector("#heat-tooltip:not([hidden])")
    assert "SM activity: not reported by this GPU" in small_page.text_content("#heat-tooltip")
    # The same cells by utilization: all three coloured, the stalled loader darkest.
    small_page.select_option("#heat-metric", "util")
    small_page.wait_for_function(f"() => ({ROW})('{NODE}').z[2] === {UTIL[2]}")
    assert small_page.is_hidden("#activity-legend")
    small_page.evaluate("localStorage.clear()")


def test_the_node_page_charts_sm_tensor_and_dram_activity_per_gpu(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + f"/nodes/{NODE}/")
    small_page.locator("#live-dram").scroll_into_view_if_needed()  # charts are drawn once near the screen
    small_page.wait_for_function(f"() => {{ const v = ({CHART_VALUES})('live-sm'); return v && v[0].length >= 2; }}")
    sm = small_page.evaluate(CHART_VALUES, "live-sm")
    assert set(sm[0]) == {100} and set(sm[1]) == {0} and sm[2] == []  # GPU 2: no line, not a line at 0
    small_page.wait_for_function(f"() => {{ const v = ({CHART_VALUES})('live-tensor'); return v && v[0].length; }}")
    tensor = small_page.evaluate(CHART_VALUES, "live-tensor")
    assert set(tensor[0]) == {50} and tensor[2] == []
    assert small_page.get_attribute("#live-dram", "aria-label") == "GPU DRAM bandwidth activity, %, last 15 minutes"
