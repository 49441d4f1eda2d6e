"""In a browser: a fabric sweep's page draws the node × node matrix as a heatmap, marks the slow node's row and
column, lists its links slowest first beside the previous sweep's figures; the launch form takes nodes."""

import pytest

from tests.browser import finished_sweep, passed_afterwards

pytestmark = pytest.mark.browser

def test_the_sweep_page_shows_the_matrix_flags_the_slow_node_and_compares_with_the_last(admin_page, running_system):
    stack, page = running_system.stack, admin_page
    with passed_afterwards(running_system):
        before = finished_sweep(stack, "sim-04", 2.0)
        sweep = finished_sweep(stack, "sim-03", 1.5)
        page.goto(f"{running_system.base_url}/benchmarks/fabric/{sweep}/")
        matrix = page.locator("#matrix")
        assert matrix.locator("thead th").all_inner_texts()[1:] == ["sim-01", "sim-02", "⚠ sim-03", "sim-04"]
        row = matrix.locator('tr[data-node="sim-03"] td')
        assert row.all_inner_texts() == ["0.15", "0.15", "", "0.15"]
        assert [row.nth(i).get_attribute("class") for i in (0, 3)] == ["num band-slow", "num band-slow"]
        assert matrix.locator('tr[data-node="sim-01"] td[data-peer="sim-02"]').get_attribute("class") == "num band-ok"
        # A coloured cell is readable: the number is printed, the colour is not all it says.
        ok = matrix.locator('tr[data-node="sim-01"] td[data-peer="sim-02"]')
        colours = ok.evaluate("td => [getComputedStyle(td).backgroundColor, getComputedStyle(td).color]")
        assert colours[0] != colours[1] and ok.inner_text() == "1.50"
        assert page.locator("#slow-nodes").inner_text() == "sim-03"
        assert f"#{before}" in page.locator("#previous").inner_text()
        first = page.locator("#links tbody tr").first.locator("td").all_inner_texts()
        assert first[0].startswith("sim-01 ↔ sim-03") and first[1:] == ["0.150", "10 %", "2.000", "⚠ slow"]

        page.goto(f"{running_system.base_url}/benchmarks/fabric/")
        assert page.locator(f'#sweeps tr[data-sweep="{sweep}"] .slow-nodes').inner_text() == "sim-03"
        assert page.locator("#sweep-form #node-picker input[name=nodes]").count() == 4
        assert page.locator("#sweep-form #rank-order").count() == 0  # a sweep has no rank order


def test_a_running_sweeps_page_loads_again_until_it_ends(admin_page, running_system):
    stack, page = running_system.stack, admin_page
    # Its one pair job stays queued (no task starts it), so the reaper leaves the sweep in its round.
    create = ("from django.utils import timezone; from dashboard.benchmarks.models import BenchmarkJob as J,"
              " FabricSweep as S; s = S.objects.create(nodes=['sim-01', 'sim-02'], rounds=[[['sim-01', 'sim-02']]],"
              " round=0, size_bytes=1 << 20, status='running', started=timezone.now()); J.objects.create(sweep=s,"
              " sweep_round=0, op='sendrecv', nodes=['sim-01', 'sim-02'], ranks_per_node=1, min_bytes=1 << 20,"
              " max_bytes=1 << 20); print(s.pk)")
    sweep = int(stack.manage("shell", "-c", create).splitlines()[-1])
    end = ("from dashboard.benchmarks.models import BenchmarkJob as J, FabricSweep as S;"
           f" J.objects.filter(sweep={sweep}).update(status='cancelled');"
           f" S.objects.filter(pk={sweep}).update(status='cancelled')")
    try:
        page.goto(f"{running_system.base_url}/benchmarks/fabric/{sweep}/")
        assert page.locator("#sweep-round").inner_text() == "1 of 1"
    finally:
        stack.manage("shell", "-c", end)  # its nodes are free again for the other tests
    # The reload every 3 s brings the sweep's end, and an ended sweep's page stays put.
    page.wait_for_function("() => document.getElementById('sweep-status').textContent.trim() === 'cancelled'",
                           timeout=10_000)
    assert page.locator("#run-active").count() == 0
