"""The benchmark chart on a phone: its toolbar (Plotly's mode bar) and its title both readable."""

import pytest

from tests.browser import launch_finished_job, log_in

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}  # an iPhone's CSS pixels, as tests/test_browser_pages.py
# The chart's title and its toolbar's buttons, where they are drawn (null before Plotly drew them).
TITLE_AND_TOOLBAR = """() => {
  const title = document.querySelector("#bandwidth-chart .gtitle");
  const buttons = Array.from(document.querySelectorAll("#bandwidth-chart .modebar-btn"),
                             b => b.getBoundingClientRect());
  if (!title || !buttons.length) return null;
  const box = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  return {title: box(title.getBoundingClientRect()), text: title.textContent, buttons: buttons.map(box)};
}"""


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_on_a_phone_the_benchmark_charts_toolbar_leaves_its_title_readable(chromium, running_system):
    """Issue 32: on a phone the benchmark chart's toolbar covered its title."""
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/benchmarks/")
        page.goto(running_system.base_url + launch_finished_job(page, running_system.base_url))
        page.locator("#bandwidth-chart").scroll_into_view_if_needed()
        page.wait_for_function(f"() => ({TITLE_AND_TOOLBAR})() !== null")
        page.locator("#bandwidth-chart .nsewdrag").first.tap()  # a tap shows the toolbar, as a hover does
        drawn = page.evaluate(TITLE_AND_TOOLBAR)
        assert drawn["text"] == "Bandwidth vs message size"
        assert drawn["title"]["right"] <= PHONE["width"], drawn
        covered = [button for button in drawn["buttons"] if overlap(button, drawn["title"])]
        assert covered == [], drawn
    finally:
        context.close()
