"""The reliability page in headless Chromium against the whole running system: a simulator fault opens an
incident with its component and clearing it closes it; the checkpoint planner plans."""

import time

import pytest

from dashboard.reliability.tracker import HEALED_AFTER
from tests.axe import axe_violations, describe
from tests.browser import log_in
from tests.test_browser_health import apply_fault
from tests.test_browser_pages import OVERFLOW, VIEWPORTS

pytestmark = pytest.mark.browser

NODE, GPU = "sim-02", 1
# The chart (time-chart.js) is drawn, or says there is nothing to draw.
# Names no simulated node has, so the node pages other tests look at stay as they were.
HISTORY = b"""start,node,component,gpu,end,planned,cause
2025-03-03T10:00:00Z,old-01,GPU HBM3 memory,2,2025-03-03T14:00:00Z,,
2025-03-04T08:00:00Z,old-02,Network switch/cable,,2025-03-04T09:00:00Z,,
2025-03-11T08:00:00Z,old-01,Host maintenance,,2025-03-11T10:00:00Z,true,BIOS update
"""
LEGEND = """() => Array.from(document.querySelectorAll("#reliability-legend .legend-entry"), e => e.textContent)"""
DRAWN = """() => document.getElementById("reliability-chart").timeChart.uplot !== null"""
DRAWN_OR_EMPTY = """() => { const chart = document.getElementById("reliability-chart").timeChart;
  return chart.uplot !== null || !chart.empty.hidden; }"""


def incidents(page, system, **query) -> list[dict]:
    """The incidents API as the logged-in browser reads it."""
    response = page.request.get(f"{system.base_url}/api/v1/reliability/incidents", params={"node": NODE, **query})
    assert response.ok, response.text()
    return response.json()["incidents"]


def wait_until(condition, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def test_a_simulator_fault_opens_an_incident_within_10_s_and_clearing_it_closes_it(admin_page, running_system):
    page, system = admin_page, running_system
    # Another test's fault on this node may hold an incident open for HEALED_AFTER after it was cleared.
    assert wait_until(lambda: not incidents(page, system, open="true"), HEALED_AFTER + 15, step=2)
    apply_fault(page, system, NODE, GPU, "pcie_degraded")
    injected = time.monotonic()
    try:
        opened = wait_until(lambda: incidents(page, system, open="true"), 10)
        assert time.monotonic() - injected <= 10
        assert [(entry["component"], entry["gpu"], entry["planned"]) for entry in opened] == [("pcie", GPU, False)]
        page.goto(system.base_url + "/reliability/")
        row = page.locator("#open-incidents tbody tr", has_text=NODE)
        assert "PCIe" in row.inner_text() and f"GPU {GPU} PCIe link" in row.inner_text()
        page.goto(f"{system.base_url}/nodes/{NODE}/")
        assert "PCIe" in page.locator("#incident-table").inner_text()
    finally:
        apply_fault(page, system, NODE, GPU, "clear")
    cleared = time.monotonic()
    assert wait_until(lambda: not incidents(page, system, open="true"), HEALED_AFTER + 15)
    [closed] = [entry for entry in incidents(page, system, open="false") if entry["start"] == opened[0]["start"]]
    assert closed["end"] is not None and time.monotonic() - cleared >= HEALED_AFTER - 1


def test_the_planner_plans_from_the_form_and_the_chart_is_drawn(admin_page, running_system):
    page = admin_page
    page.goto(running_system.base_url + "/reliability/")
    page.wait_for_function(DRAWN_OR_EMPTY)
    page.fill("#planner-form [name=nodes]", "1")
    page.fill("#planner-form [name=hours]", "24")
    page.fill("#planner-form [name=checkpoint_write_s]", "300")
    page.fill("#planner-form [name=node_mtbf_h]", "24")
    with page.expect_navigation():
        page.click("#planner-form button[type=submit]")
    # Daly's own figure: δ = 5 min, M = 24 h gives 116.7 min.
    assert page.text_content("#plan-daly") == "7001 s"
    assert page.text_content("#plan-young") == "7200 s"
    assert page.text_content("#plan-p") == "63.2 %"  # 1 − e^−1
    assert page.locator("#import-form").is_visible()  # the admin is staff


def test_staff_import_history_from_the_page_and_it_is_charted_and_passes_axe_on_a_phone(admin_page, chromium,
                                                                                         running_system):
    page, base = admin_page, running_system.base_url
    page.goto(base + "/reliability/")
    page.set_input_files("#import-form [name=file]", files=[{"name": "history.csv", "mimeType": "text/csv",
                                                              "buffer": HISTORY}])
    page.fill("#import-form [name=nodes]", "64")
    page.fill("#import-form [name=since]", "2025-03-01T00:00Z")
    page.fill("#import-form [name=until]", "2025-04-01T00:00Z")
    with page.expect_navigation():
        page.click("#import-form button[type=submit]")
    assert "Imported 3 incidents (1 planned)" in page.locator(".messages").inner_text()
    page.wait_for_function(DRAWN)
    legend = page.evaluate(LEGEND)
    assert "GPU HBM3 memory" in legend and "Network switch/cable" in legend and "Host maintenance" not in legend
    assert "old-01" in page.locator("#node-table").inner_text()

    problems = []
    for width, viewport in VIEWPORTS.items():
        context = chromium.new_context(viewport=viewport)
        try:
            viewer = context.new_page()
            log_in(viewer, base, running_system.username, running_system.password, "/reliability/")
            viewer.wait_for_function(DRAWN)
            problems += describe(axe_violations(viewer), f"/reliability/ at {width}")
            overflow = viewer.evaluate(OVERFLOW)
            if overflow["scrollWidth"] > overflow["innerWidth"]:
                problems.append(f"/reliability/ at {width} is {overflow['scrollWidth']} px wide: {overflow['wide']}")
        finally:
            context.close()
    assert not problems, "\n".join(problems)
