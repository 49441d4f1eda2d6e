"""Issue 18's overview without a mouse, in a browser on the running system: the heatmap
and the node table's headers by keyboard, a phone's tap previewing a GPU before it opens
its node; and the node page's alerts, which follow the evaluator without a reload."""

import time

import pytest

from tests.browser import CELL_POSITION, OVERVIEW_DRAWN, log_in
from tests.test_browser_node_and_overview_views import manage_shell

pytestmark = pytest.mark.browser

HOT_RULE = "operator input hot"  # fires on sim-04's GPU 0: every simulated GPU is hotter than 1 °C
# What the picked cell shows, and how often the tooltip and the live region were written.
PICKED = """() => {
  const box = document.getElementById("heat-focus"), tip = document.getElementById("heat-tooltip");
  const link = document.getElementById("heat-tooltip-open");
  return {
    active: document.activeElement.id,
    box: box.hidden ? null : box.getBoundingClientRect().toJSON(),
    tip: tip.hidden ? null : document.getElementById("heat-tooltip-text").textContent,
    link: link.checkVisibility() ? link.getAttribute("href") : null,
    said: document.getElementById("heat-said").textContent,
    rows: Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent.split(" ")[0]),
    frames: window.gpulse.frames,
    writes: window.writes,
  };
}"""
COUNT_WRITES = """() => {
  window.writes = {tip: 0, said: 0};
  const count = (id, key) => new MutationObserver((records) => { window.writes[key] += records.length; })
    .observe(document.getElementById(id), {childList: true});
  count("heat-tooltip-text", "tip");
  count("heat-said", "said");
}"""


def create_hot_rule(system) -> None:
    """A rule that fires on sim-04's GPU 0 at the evaluator's next tick."""
    manage_shell(system, f"Rule.objects.create(name={HOT_RULE!r}, metric='gpu.temp', comparison='>', "
                         "threshold=1, node_glob='sim-04', gpu_index=0)")


def delete_hot_rule(system) -> None:
    manage_shell(system, f"Rule.objects.filter(name={HOT_RULE!r}).delete()")


@pytest.fixture
def hot_rule(running_system):
    create_hot_rule(running_system)
    yield HOT_RULE
    delete_hot_rule(running_system)


def open_overview(page, system, path="/"):
    page.goto(system.base_url + path)
    page.wait_for_function(OVERVIEW_DRAWN)


def inside(box, point) -> bool:
    return box["left"] <= point["x"] <= box["right"] and box["top"] <= point["y"] <= box["bottom"]


def wait_picked(page, text: str) -> dict:
    page.wait_for_function(f"() => ({PICKED})().tip?.startsWith({text!r})")
    return page.evaluate(PICKED)


def test_the_heatmap_is_one_tab_stop_whose_arrow_keys_walk_the_gpus(admin_page, running_system, hot_rule):
    page = admin_page
    open_overview(page, running_system)
    page.evaluate(COUNT_WRITES)
    page.focus("#node-order")
    page.keyboard.press("Tab")
    first = wait_picked(page, "sim-01 · GPU 0")
    assert first["active"] == "heatmap" and inside(first["box"], page.evaluate(CELL_POSITION, [0, 0]))
    assert first["link"] is None  # Enter opens the node: no link to tab to
    assert first["said"].startswith("sim-01 · GPU 0. H100 80GB HBM3. Utilization:"), first["said"]

    for key in ("ArrowRight", "ArrowRight", "ArrowDown"):
        page.keyboard.press(key)
    moved = wait_picked(page, "sim-02 · GPU 2")
    assert moved["said"].startswith("sim-02 · GPU 2.") and inside(moved["box"], page.evaluate(CELL_POSITION, [1, 2]))
    # Frames refresh the tooltip's readings; the live region speaks once per move only.
    page.wait_for_function(f"() => window.gpulse.frames >= {moved['frames'] + 3}")
    later = page.evaluate(PICKED)
    assert later["writes"]["tip"] >= moved["writes"]["tip"] + 3, later["writes"]
    assert later["writes"]["said"] == moved["writes"]["said"] == 4, later["writes"]  # focus and three moves

    # Problems first, chosen while the heatmap keeps the focus: the alerting sim-04 goes on top,
    # and the picked cell stays on sim-02's GPU 2, a row lower than before.
    page.eval_on_selector("#node-order", "s => { s.value = 'problems'; s.dispatchEvent(new Event('change')); }")
    page.wait_for_function(f"() => ({PICKED})().rows[0] === 'sim-04'", timeout=30_000)
    reordered = wait_picked(page, "sim-02 · GPU 2")
    assert reordered["rows"] == ["sim-04", "sim-01", "sim-02", "sim-03"] and reordered["active"] == "heatmap"
    assert inside(reordered["box"], page.evaluate(CELL_POSITION, [2, 2]))

    page.keyboard.press("End")
    wait_picked(page, "sim-02 · GPU 7")
    page.keyboard.press("PageDown")
    wait_picked(page, "sim-03 · GPU 7")
    page.keyboard.press("Control+Home")
    wait_picked(page, "sim-04 · GPU 0")
    assert "alert firing" in page.evaluate(PICKED)["said"]

    page.keyboard.press("Escape")
    page.wait_for_function(f"() => ({PICKED})().tip === null")
    assert page.evaluate(PICKED)["box"] is None and page.evaluate(PICKED)["active"] == "heatmap"
    page.keyboard.press("ArrowDown")
    wait_picked(page, "sim-01 · GPU 0")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == running_system.base_url + "/nodes/sim-01/"


def test_the_node_tables_headers_sort_by_keyboard_and_keep_the_focus(admin_page, running_system):
    page = admin_page
    open_overview(page, running_system)
    page.wait_for_function("() => document.querySelectorAll('#node-table tbody tr').length === 4")
    sorts = "() => Array.from(document.querySelectorAll('#node-table th'), th => th.getAttribute('aria-sort'))"
    assert page.evaluate(sorts)[:2] == ["ascending", "none"]
    page.focus("#node-table th[data-key='temp'] button")
    page.keyboard.press("Enter")
    assert page.get_attribute("#node-table th[data-key='temp']", "aria-sort") == "descending"
    assert page.get_attribute("#node-table th[data-key='name']", "aria-sort") == "none"
    page.keyboard.press("Space")
    assert page.get_attribute("#node-table th[data-key='temp']", "aria-sort") == "ascending"
    temps = page.eval_on_selector_all("#node-table tbody tr", "trs => trs.map(tr => parseFloat(tr.cells[6].innerText))")
    assert temps == sorted(temps), temps
    frames = page.evaluate("window.gpulse.frames")
    page.wait_for_function(f"() => window.gpulse.frames >= {frames + 3}")
    focused = page.evaluate("() => [document.activeElement.tagName, document.activeElement.textContent]")
    assert focused == ["BUTTON", "Max °C"]
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Power W"


@pytest.fixture
def phone(chromium, running_system):
    context = chromium.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    log_in(page, running_system.base_url, running_system.username, running_system.password, "/healthz")
    yield page
    context.close()


def tap_cell(page, row: int, gpu: int) -> None:
    spot = page.evaluate(CELL_POSITION, [row, gpu])
    page.touchscreen.tap(spot["x"], spot["y"])


def test_a_tap_on_a_phone_previews_the_gpu_and_a_second_tap_opens_its_node(phone, running_system):
    open_overview(phone, running_system)
    phone.locator("#heatmap").scroll_into_view_if_needed()
    # Columns too narrow for "GPU 3" are headed by the index alone, not by heads run together.
    assert phone.locator("#heatmap .heat-cols span").all_text_contents() == [str(g) for g in range(8)]
    tap_cell(phone, 0, 3)
    preview = wait_picked(phone, "sim-01 · GPU 3")
    assert preview["link"] == "/nodes/sim-01/" and phone.url == running_system.base_url + "/"
    time.sleep(2)  # frames refresh the preview; it stays open
    assert phone.evaluate(PICKED)["tip"].startswith("sim-01 · GPU 3")

    phone.locator(".legend").tap()  # anywhere else
    phone.wait_for_function(f"() => ({PICKED})().tip === null")
    phone.locator("#heatmap").scroll_into_view_if_needed()
    tap_cell(phone, 1, 0)
    wait_picked(phone, "sim-02 · GPU 0")
    with phone.expect_navigation():
        tap_cell(phone, 1, 0)
    assert phone.url == running_system.base_url + "/nodes/sim-02/"

    open_overview(phone, running_system)
    phone.locator("#heatmap").scroll_into_view_if_needed()
    tap_cell(phone, 2, 5)
    wait_picked(phone, "sim-03 · GPU 5")
    with phone.expect_navigation():
        phone.locator("#heat-tooltip-open").tap()
    assert phone.url == running_system.base_url + "/nodes/sim-03/"


def test_the_node_pages_alerts_fire_and_resolve_without_a_reload(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/nodes/sim-04/")
    assert page.text_content("#node-alerts-none") == "No alerts firing or pending on this node."
    page.evaluate("window.sameDocument = true")  # gone after a reload
    page.eval_on_selector("#node-alerts", "s => { s.seen = true; }")  # a property: the markup stays the same
    page.wait_for_timeout(6000)  # a refresh found nothing new: the section is the same element, focus kept
    assert page.eval_on_selector("#node-alerts", "s => s.seen") is True
    create_hot_rule(running_system)
    try:
        row = page.locator("#node-alert-table tr.status-firing")
        row.wait_for(timeout=30_000)
        cells = [cell.strip() for cell in row.locator("td").all_text_contents()]
        assert cells[:4] == [HOT_RULE, "firing", "0", "GPU temperature above 1 °C"], cells
        page.wait_for_selector("#gpu-table tbody tr.alerting")
        # Its other tags come and go with the simulated job on it ("SM IDLE" once its loader stalls a minute).
        assert page.locator("#gpu-table tbody tr.alerting td").first.text_content().split()[:2] == ["0", "ALERT"]

        manage_shell(running_system, f"Rule.objects.filter(name={HOT_RULE!r}).update(threshold=1000)")
        page.wait_for_selector("#node-alerts-none", timeout=30_000)
        page.wait_for_function("() => !document.querySelector('#gpu-table tbody tr.alerting')")
        assert page.evaluate("window.sameDocument") is True
    finally:
        delete_hot_rule(running_system)
