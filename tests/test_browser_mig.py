"""MIG instances on the pages (issue 36): the overview heatmap draws a GPU in MIG mode divided into its instances,
coloured by each one's own value where the colour mode has one, and says "MIG" where utilization has none; the node
page lists the instances. Real samples through a real ingest to Chromium; the node is fed by a thread standing in
for its collector. What the node sends is shown as text, never markup."""

import pytest

from tests.axe import axe_violations, describe
from tests.browser import CELL_POSITION, HATCH_COLOURS
from tests.feeder import feeding
from tests.samples import sample
from tests.test_browser_overview_behaviour import small_page, small_system  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

NODE = "mig-01"
ALL_MIG_NODE = "mig-02"
GIB = 1024**3
MARKUP = "<img src=x id=injected>"
# GPU 1 in MIG mode: a 3-slice instance busy for user ana, a 1-slice one held but idle, a 1-slice one free without
# SM activity; 2 of its 7 slices unmade.
INSTANCES = [
    {"gpu_instance": 1, "compute_instance": 0, "profile": "3g.40gb", "uuid": "MIG-aaaa", "mem_used": 30 * GIB,
     "mem_total": 40 * GIB, "sm_active": 0.9, "processes": [{"pid": 11, "user": "ana", "job": "41002", "step": "0"}]},
    {"gpu_instance": 2, "compute_instance": 0, "profile": "1g.10gb", "uuid": "MIG-" + MARKUP, "mem_used": 1 * GIB,
     "mem_total": 10 * GIB, "sm_active": 0.05, "processes": [{"pid": 12, "user": MARKUP}]},
    {"gpu_instance": 3, "compute_instance": 0, "profile": "1g.10gb", "uuid": "MIG-cccc", "mem_used": 0,
     "mem_total": 10 * GIB, "sm_active": None, "processes": []},
]
MIG_FILL, PANEL = "#d3dae4", "#ffffff"  # heatmap.js MIG_FILL; gpulse.css --panel (the light theme)

ROW = """(name) => {
  const drawn = document.getElementById("heatmap").gpulseDrawn;
  const r = Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent)
    .findIndex(t => t.startsWith(name));
  return r < 0 || !drawn.mig[r] ? null : {r: r, z: drawn.z[r], text: drawn.text[r], mig: drawn.mig[r]};
}"""
# The colour painted at a fraction ``at`` of a heatmap cell's width, near its top ("#rrggbb").
COLOUR_AT = """([row, gpu, at]) => {
  const canvas = document.querySelector("#heatmap .heat-cells"), drawn = document.getElementById("heatmap").gpulseDrawn;
  const x = Math.floor((gpu + at) * canvas.width / drawn.z[0].length);
  const y = Math.floor((row + 0.2) * canvas.height / drawn.z.length);
  const pixel = canvas.getContext("2d").getImageData(x, y, 1, 1).data;
  return "#" + Array.from(pixel.slice(0, 3), c => c.toString(16).padStart(2, "0")).join("");
}"""


def mig_sample() -> dict:
    s = sample(NODE, gpus=2)
    s["gpus"][0].update(util=60, sm_active=0.5)
    # The parent: util null in MIG mode (NVML's NOT_SUPPORTED), its processes all its instances'.
    s["gpus"][1].update(util=None, sm_active=None, mig_enabled=True, mig=INSTANCES,
                        processes=[p for inst in INSTANCES for p in inst["processes"]])
    return s


def all_mig_sample() -> dict:
    """ALL_MIG_NODE: both GPUs in MIG mode, so no GPU of it reports utilization."""
    s = sample(ALL_MIG_NODE, gpus=2)
    for gpu in s["gpus"]:
        gpu.update(util=None, sm_active=None, mig_enabled=True, mig=INSTANCES[:1], processes=[])
    return s


@pytest.fixture(scope="module")
def fed(small_system):  # noqa: F811
    """NODE's and ALL_MIG_NODE's collectors, in a system of the module's own (its nodes must not show up in the
    shared system's pages), until the module is done."""
    with feeding(small_system.redis_url, NODE, mig_sample), \
            feeding(small_system.redis_url, ALL_MIG_NODE, all_mig_sample):
        yield small_system


def test_a_mig_gpu_is_drawn_divided_into_its_instances(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + "/")
    small_page.select_option("#heat-metric", "util")
    small_page.wait_for_function(f"() => ({ROW})('{NODE}') !== null")
    row = small_page.evaluate(ROW, NODE)
    # Utilization: none per instance and none on the GPU, yet not "no data": the instances in the MIG slate.
    assert row["z"] == [60, None] and row["text"][1] == "MIG ×3"
    assert [(part["from"], part["to"], part["v"]) for part in row["mig"][1]] == [
        (0, pytest.approx(3 / 7), None), (pytest.approx(3 / 7), pytest.approx(4 / 7), None),
        (pytest.approx(4 / 7), pytest.approx(5 / 7), None)]
    assert row["mig"][0] is None
    assert small_page.evaluate(COLOUR_AT, [row["r"], 1, 0.2]) == MIG_FILL
    assert small_page.evaluate(COLOUR_AT, [row["r"], 1, 0.9]) == PANEL  # 2 slices not made into instances
    centre = small_page.evaluate(CELL_POSITION, [row["r"], 1])
    small_page.mouse.move(centre["x"], centre["y"])
    small_page.wait_for_selector("#heat-tooltip:not([hidden])")
    tooltip = small_page.text_content("#heat-tooltip")
    assert "Utilization: MIG: 3 instances" in tooltip and "util: per instance in MIG mode" in tooltip
    assert "GI 1/0 3g.40gb · SM 90 % · 30.0 / 40.0 GiB · held" in tooltip
    assert "GI 2/0 1g.10gb · SM 5 % · 1.0 / 10.0 GiB · held, idle" in tooltip
    assert "GI 3/0 1g.10gb · SM not reported · 0.0 / 10.0 GiB · free" in tooltip

    # SM activity: each instance its own colour, the one without it hatched (no data, never 0).
    small_page.mouse.move(0, 0)
    small_page.select_option("#heat-metric", "activity")
    small_page.wait_for_function(f"() => ({ROW})('{NODE}').mig[1][0].v === 90")
    row = small_page.evaluate(ROW, NODE)
    assert [part["v"] for part in row["mig"][1]] == [90, 5, None]
    busy, idle = (small_page.evaluate(COLOUR_AT, [row["r"], 1, at]) for at in (0.2, 0.5))
    assert busy != idle and MIG_FILL not in (busy, idle)
    hatch = {small_page.evaluate(COLOUR_AT, [row["r"], 1, 0.6 + k * 0.01]) for k in range(8)}
    assert hatch & HATCH_COLOURS, hatch
    # Usage: held and busy, held and idle, free.
    small_page.select_option("#heat-metric", "usage")
    small_page.wait_for_function(f"() => ({ROW})('{NODE}').mig[1][2].v === 0")
    assert [part["v"] for part in small_page.evaluate(ROW, NODE)["mig"][1]] == [1, 2, 0]
    assert small_page.query_selector("#injected") is None
    problems = describe(axe_violations(small_page), "/ with a MIG node")
    small_page.evaluate("localStorage.clear()")
    assert problems == [], "\n".join(problems)


UTIL_CELL = """(name) => {
  const util = Array.from(document.querySelectorAll("#node-table thead th")).findIndex(th => th.dataset.key === "util");
  const row = document.querySelector(`#node-table tbody tr[data-node="${name}"]`);
  return row ? {text: row.cells[util].textContent, title: row.cells[util].title} : null;
}"""


def test_the_node_table_says_mig_where_no_gpu_reports_utilization(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + "/")
    small_page.wait_for_function(f"() => ({UTIL_CELL})('{ALL_MIG_NODE}') && ({UTIL_CELL})('{NODE}')")
    all_mig, mixed = (small_page.evaluate(UTIL_CELL, name) for name in (ALL_MIG_NODE, NODE))
    assert all_mig == {"text": "MIG", "title": "2 GPUs in MIG mode, which report no utilization: "
                                               "see SM activity on the heatmap or the node page"}
    # The mixed node: the mean of its one GPU not in MIG mode, and the title says the other is left out.
    assert mixed == {"text": "60.0", "title": "1 GPU in MIG mode, which reports no utilization, not in this mean: "
                                              "see SM activity on the heatmap or the node page"}


def test_the_node_page_lists_each_instance_as_text(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + f"/nodes/{NODE}/")
    small_page.wait_for_selector("#mig-table tbody tr:nth-child(3)")
    assert small_page.is_visible("#mig-panel")
    cells = small_page.eval_on_selector_all(
        "#mig-table tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert cells == [
        ["1", "1", "0", "3g.40gb", "MIG-aaaa", "30.0 / 40.0", "90", "1", "ana (41002.0)"],
        ["1", "2", "0", "1g.10gb", "MIG-" + MARKUP, "1.0 / 10.0", "5", "1", MARKUP],
        ["1", "3", "0", "1g.10gb", "MIG-cccc", "0.0 / 10.0", "not reported", "0", "—"],
    ]
    assert small_page.query_selector("#injected") is None
    problems = describe(axe_violations(small_page), f"/nodes/{NODE}/")
    assert problems == [], "\n".join(problems)


def test_the_node_api_carries_the_instances(fed, small_page):  # noqa: F811
    answer = small_page.request.get(fed.url.rstrip("/") + f"/api/v1/nodes/{NODE}")
    assert answer.ok
    gpus = answer.json()["gpus"]
    assert gpus[0].get("mig") is None
    assert [(i["gpu_instance"], i["profile"], i["uuid"]) for i in gpus[1]["mig"]] == [
        (i["gpu_instance"], i["profile"], i["uuid"]) for i in INSTANCES]
