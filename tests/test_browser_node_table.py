"""The overview's node table on a fleet of more nodes than its box shows (static/gpulse/table.js):
only the rows in and near the box's view are drawn, the rest stood in for by margins, so the box
scrolls over every node; its first rows come a few an animation frame and end whole, in order; a
focused row stays drawn wherever the box is scrolled or the sort moves it; rows sorted by a column
that changes every second follow it while keeping their cells."""

import pytest

from devtools.redis_server import free_port
from devtools.stack import Stack, sim_node_names
from tests.browser import logged_in_page
from tests.fixtures_system import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.browser

NODES = 110  # several boxes' views of rows at the tests' viewport, and over table.js's NEW_ROWS_A_FRAME
ROWS_A_FRAME = 40
TALL = {"width": 1440, "height": 2400}  # a box 1,800 px high: more rows drawn at once than one frame makes
UNDER_A_VIEW = "sim-01"  # a filter that 10 of the fleet's nodes match (sim-010 to sim-019): all drawn

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
NAMES = """() => Array.from(document.querySelectorAll("#node-table tbody tr[data-node]")).map(tr => tr.dataset.node)"""
UTILS = """() => Array.from(document.querySelectorAll("#node-table tbody tr")).map(tr => tr.cells[5].textContent)"""
MARK_CELLS = """() => document.querySelectorAll("#node-table tbody tr").forEach(tr => {
  tr.cells[2].kept = true;
  tr.cells[5].kept = true;
})"""
KEPT_CELLS = """() => Array.from(document.querySelectorAll("#node-table tbody tr")).map(
  tr => [tr.cells[2].kept === true, tr.cells[5].kept === true])"""
SCROLL_BOX = """(fraction) => {
  const box = document.querySelector("#node-table").closest(".table-wrap");
  box.scrollTop = fraction * (box.scrollHeight - box.clientHeight);
}"""
# The box's view: each drawn row it shows at least half of, as [node, aria-rowindex], and the rows it has.
IN_VIEW = """() => {
  const box = document.querySelector("#node-table").closest(".table-wrap").getBoundingClientRect();
  const head = document.querySelector("#node-table thead").getBoundingClientRect();
  return Array.from(document.querySelectorAll("#node-table tbody tr[data-node]")).filter(tr => {
    const r = tr.getBoundingClientRect();
    return r.top + r.height / 2 > head.bottom && r.top + r.height / 2 < box.bottom;
  }).map(tr => [tr.dataset.node, Number(tr.getAttribute("aria-rowindex"))]);
}"""


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
    page.wait_for_function(f"() => document.getElementById('node-count').textContent === '{NODES} nodes'")
    page.wait_for_function(f"() => ({NAMES})().length > 0 && ({IN_VIEW})().length > 10")


def test_the_first_rows_are_made_a_few_an_animation_frame_and_end_whole_in_order(fleet_page, fleet):
    fleet_page.set_viewport_size(TALL)
    open_overview(fleet_page, fleet)
    fleet_page.wait_for_timeout(300)  # the frame after the last rows, counted
    counts = fleet_page.evaluate("() => window.rowCounts.slice()")
    added = [after - before for before, after in zip(counts, counts[1:], strict=False) if after > before]
    assert max(added) <= ROWS_A_FRAME, counts
    assert len(added) >= 2, counts  # more rows than one frame makes
    drawn = fleet_page.evaluate(NAMES)
    assert drawn == sim_node_names(NODES)[:len(drawn)]
    assert len(drawn) < NODES  # only the rows in and near the box's view
    in_view = fleet_page.evaluate(IN_VIEW)
    assert in_view == [[name, k + 2] for k, name in enumerate(sim_node_names(NODES)[:len(in_view)])]
    assert fleet_page.get_attribute("#node-table", "aria-rowcount") == str(NODES + 1)


def test_scrolling_the_box_draws_the_rows_scrolled_to_in_their_places(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    names = sim_node_names(NODES)
    for fraction in (1.0, 0.5):
        fleet_page.evaluate(SCROLL_BOX, fraction)
        fleet_page.wait_for_timeout(300)
        in_view = fleet_page.evaluate(IN_VIEW)
        # Each row the box shows is the node in that place of the sorted list: the margins stand in for the others.
        assert len(in_view) > 10
        assert in_view == [[names[k - 2], k] for _, k in in_view]
        assert [k for _, k in in_view] == list(range(in_view[0][1], in_view[0][1] + len(in_view)))
        assert len(fleet_page.evaluate(NAMES)) < NODES / 2
    fleet_page.evaluate(SCROLL_BOX, 1.0)
    fleet_page.wait_for_timeout(300)
    assert fleet_page.evaluate(IN_VIEW)[-1] == [names[-1], NODES + 1]
    fleet_page.click('#node-table th[data-key="name"]')  # name was ascending: now descending
    fleet_page.evaluate(SCROLL_BOX, 0.0)
    fleet_page.wait_for_function("() => document.querySelector('#node-table tbody tr').dataset.node === 'sim-110'")
    fleet_page.fill("#node-filter", "sim-105")
    fleet_page.wait_for_function(f"() => ({NAMES})().join() === 'sim-105'")
    assert fleet_page.locator("#node-count").text_content() == f"1 of {NODES} nodes"


def test_a_focused_row_stays_drawn_and_focused_when_the_box_scrolls_away_from_it(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.focus("#node-table tr[data-node='sim-002'] a")
    fleet_page.evaluate(SCROLL_BOX, 1.0)
    fleet_page.wait_for_timeout(2500)  # frames arrive, the table renders again
    assert fleet_page.evaluate("() => document.activeElement.closest('tr').dataset.node") == "sim-002"
    assert fleet_page.evaluate(IN_VIEW)[-1] == [sim_node_names(NODES)[-1], NODES + 1]
    drawn = fleet_page.evaluate(NAMES)
    assert drawn[0] == "sim-002" and len(drawn) < NODES / 2  # the rows between are one gap, not drawn
    fleet_page.keyboard.press("Tab")  # on to the next link drawn: a row by the box's view, scrolled into it
    fleet_page.wait_for_timeout(300)
    focused = fleet_page.evaluate("() => document.activeElement.closest('tr').dataset.node")
    assert focused in [name for name, _ in fleet_page.evaluate(IN_VIEW)]


def test_a_focused_row_stays_drawn_and_focused_when_the_sort_moves_it_away(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.focus("#node-table tr[data-node='sim-001'] a")
    # A click that leaves the focus where it is (a mouse click would focus the header's button): name descending.
    fleet_page.evaluate("""() => document.querySelector('#node-table th[data-key="name"] button')
      .dispatchEvent(new MouseEvent("click", {bubbles: true}))""")
    fleet_page.wait_for_function("() => document.querySelector('#node-table tbody tr').dataset.node === 'sim-110'")
    fleet_page.wait_for_timeout(1500)  # frames arrive, the table renders again
    assert fleet_page.evaluate("() => document.activeElement.closest('tr').dataset.node") == "sim-001"
    assert fleet_page.get_attribute("#node-table tr[data-node='sim-001']", "aria-rowindex") == str(NODES + 1)
    drawn = fleet_page.evaluate(NAMES)
    assert drawn[-1] == "sim-001" and len(drawn) < NODES / 2  # the rows between are one gap, not drawn


def test_rows_sorted_by_a_changing_column_follow_it_and_keep_their_cells(fleet_page, fleet):
    open_overview(fleet_page, fleet)
    fleet_page.fill("#node-filter", UNDER_A_VIEW)  # every match drawn: no row comes or goes as the order changes
    fleet_page.wait_for_function(f"() => ({NAMES})().length === 10")
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
    assert fleet_page.evaluate(KEPT_CELLS) == [[True, True]] * 10
