"""The overview's node table on a fleet of more nodes than it makes rows in one animation
frame and than it shows (static/gpulse/table.js): its first rows come a few a frame and end
whole, the first 100 in the chosen order, sorting or the filter reach the others, and rows
sorted by a column that changes every second follow it while keeping their cells."""

import pytest

from devtools.redis_server import free_port
from devtools.stack import Stack, sim_node_names
from tests.browser import logged_in_page
from tests.fixtures_system import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.browser

NODES = 110  # over table.js's NEW_ROWS_A_FRAME (40) and its TABLE_MAX_ROWS (100)
ROWS_A_FRAME = 40
SHOWN = 100
UNDER_100 = "sim-0"  # a filter that 99 of the fleet's nodes match (sim-001 to sim-099)

# The rows in the table at each animation frame, from before the page's own scripts run.
COUNT_ROWS = """(() => {
  const counts = (window.rowCounts = []);
  function count() {
    const tbody = document.querySelector("#node-table tbody");
    counts.push(tbody ? tbody.rows.length : 0);
    requestAnimationFrame(count);
  }
  requestAnimationFrame(count);
})();"""
NAMES = """() => Array.from(document.querySelectorAll("#node-table tbody tr")).map(tr => tr.dataset.node)"""
UTILS = """() => Array.from(document.querySelectorAll("#node-table tbody tr")).map(tr => tr.cells[5].textContent)"""
MARK_CELLS = """() => document.querySelectorAll("#node-table tbody tr").forEach(tr => {
  tr.cells[2].kept = true;
  tr.cells[5].kept = true;
})"""
KEPT_CELLS = """() => Array.from(document.querySelectorAll("#node-table tbody tr")).map(
  tr => [tr.cells[2].kept === true, tr.cells[5].kept === true])"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    stack = Stack(
        port=free_port(), state_dir=tmp_path_factory.mktemp("node-table"), sim_nodes=NODES, sim_gpus=1,
        interval=1.0, node_workers=False, extra_env={"GPULSE_ADMIN_PASSWORD": ADMIN_PASSWORD},
    )
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def fleet_page(chromium, fleet):
    with logged_in_page(chromium, fleet.url.rstrip("/"), ADMIN_USER, ADMIN_PASSWORD, 30_000, COUNT_ROWS) as page:
        yield page


def open_overview(page, fleet):
    page.goto(fleet.url.rstrip("/") + "/")
    page.wait_for_function(f"() => document.querySelectorAll('#node-table tbody tr').length === {SHOWN}")


def test_the_first_rows_are_made_a_few_an_animation_frame_and_end_whole_in_order(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.wait_for_timeout(200)  # the frame after the last rows, counted
    counts = fleet_page.evaluate("() => window.rowCounts.slice()")
    added = [after - before for before, after in zip(counts, counts[1:], strict=False) if after != before]
    assert max(added) <= ROWS_A_FRAME, counts
    assert len(added) >= 3, counts  # 40, 40, then 20: in three frames at least
    assert fleet_page.locator("#node-count").text_content() == (
        f"{NODES} nodes, first {SHOWN} shown: sort or filter to see others")
    assert fleet_page.evaluate(NAMES) == sim_node_names(NODES)[:SHOWN]


def test_past_the_first_100_rows_sorting_or_the_filter_reach_every_node(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.click('#node-table th[data-key="name"]')  # name was ascending: now descending
    fleet_page.wait_for_function("() => document.querySelector('#node-table tbody tr').dataset.node === 'sim-110'")
    assert fleet_page.evaluate(NAMES) == sim_node_names(NODES)[::-1][:SHOWN]
    fleet_page.fill("#node-filter", "sim-105")
    fleet_page.wait_for_function(f"() => ({NAMES})().join() === 'sim-105'")
    assert fleet_page.locator("#node-count").text_content() == f"1 of {NODES} nodes"


def test_rows_sorted_by_a_changing_column_follow_it_and_keep_their_cells(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.fill("#node-filter", UNDER_100)  # every match shown: no row comes or goes as the order changes
    fleet_page.wait_for_function(f"() => ({NAMES})().length === {SHOWN - 1}")
    fleet_page.click('#node-table th[data-key="util"]')
    assert fleet_page.get_attribute('#node-table th[data-key="util"]', "aria-sort") == "descending"
    fleet_page.evaluate(MARK_CELLS)
    first = fleet_page.evaluate(UTILS)
    orders = set()
    for _ in range(5):
        fleet_page.wait_for_timeout(1000)
        utils = [float(text) for text in fleet_page.evaluate(UTILS)]
        assert utils == sorted(utils, reverse=True)
        orders.add(tuple(fleet_page.evaluate(NAMES)))
    assert len(orders) > 1, "the order never changed: the test shows nothing"
    last = fleet_page.evaluate(UTILS)
    assert first != last
    # The age and utilization cells took their new text in place: still the cells marked.
    assert fleet_page.evaluate(KEPT_CELLS) == [[True, True]] * (SHOWN - 1)
