"""What an operator meets on the overview: keyboard focus that survives live frames,
nodes whose clock is off, and nodes ingest forgets."""

import contextlib
import threading
import time

import pytest
import redis

from devtools.redis_server import free_port
from devtools.stack import Stack
from gpulse import schema
from gpulse.keys import Keys, node_ttl
from tests.browser import CELL_COLOUR, CELL_POSITION, failing_on_script_errors, logged_in_page
from tests.fixtures_system import ADMIN_PASSWORD, ADMIN_USER
from tests.samples import sample
from tests.test_browser_operator_input import PICKED, wait_picked

pytestmark = pytest.mark.browser

FOCUSED = """() => {
  const el = document.activeElement;
  return {tag: el.tagName, text: el.textContent, connected: el.isConnected, frames: window.gpulse.frames};
}"""
FORGET_AFTER_S = 60  # GPULSE_NODE_FORGET_AFTER's minimum
SKEW_S = -3600


def test_keyboard_focus_stays_on_a_node_link_while_frames_arrive(admin_page, running_system):
    admin_page.goto(running_system.base_url + "/")
    admin_page.wait_for_function("() => window.gpulse && window.gpulse.frames > 0 && "
                                 "document.querySelectorAll('#node-table tbody tr').length === 4")
    admin_page.focus("#node-table tr[data-node='sim-02'] a")
    before = admin_page.evaluate(FOCUSED)
    assert before["tag"] == "A" and before["text"] == "sim-02"
    time.sleep(5)
    after = admin_page.evaluate(FOCUSED)
    assert after["frames"] >= before["frames"] + 3, "frames stopped arriving"
    assert after["tag"] == "A" and after["text"] == "sim-02" and after["connected"], after
    with admin_page.expect_navigation():
        admin_page.keyboard.press("Enter")
    assert admin_page.url == running_system.base_url + "/nodes/sim-02/"


class SkewedNode:
    """A collector whose clock is an hour behind, on its own thread: one sample a second."""

    name = "drift-01"

    def __init__(self, client):
        self.client = client
        self.keys = Keys()
        self.boot = "run-a"
        self.seq = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stopped.is_set():
            self.seq += 1
            s = {**sample(self.name, ts=time.time() + SKEW_S), "boot": self.boot, "seq": self.seq}
            encoded = schema.encode(s)
            self.client.xadd(self.keys.telemetry_stream(self.name), {"s": encoded})
            self.client.set(self.keys.node(self.name), encoded, ex=node_ttl(1.0))
            self.stopped.wait(1.0)

    def restart(self):
        """A new collector run: ingest counts a restart."""
        self.boot, self.seq = "run-b", 0

    def stop(self):
        self.stopped.set()
        self.thread.join()


@contextlib.contextmanager
def small_stack(tmp_path_factory, **env: str):
    """A system of its own (one simulated node) that forgets down nodes after a minute, with ``env`` set:
    the nodes these tests add must not show up in the shared system's pages."""
    stack = Stack(
        port=free_port(), state_dir=tmp_path_factory.mktemp("small-system"), sim_nodes=1, sim_gpus=2,
        interval=1.0, node_workers=False,
        extra_env={"GPULSE_ADMIN_PASSWORD": ADMIN_PASSWORD, "GPULSE_NODE_FORGET_AFTER": str(FORGET_AFTER_S), **env},
    )
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def small_system(tmp_path_factory):
    with small_stack(tmp_path_factory) as stack:
        yield stack


@pytest.fixture(scope="module")
def small_page(chromium, small_system):
    with logged_in_page(chromium, small_system.url.rstrip("/"), ADMIN_USER, ADMIN_PASSWORD, next_path="/") as page:
        yield page


def test_a_node_with_a_skewed_clock_comes_and_goes_while_the_keyboards_cell_follows_its_gpu(small_system, small_page):
    # One node does both stories, so they share the minute's wait for ingest to forget it: the overview
    # (small_page, never reloaded) keeps the keyboard on the heatmap, a second tab opens the node's page.
    base = small_system.url.rstrip("/")
    node = SkewedNode(redis.Redis.from_url(small_system.redis_url))  # before sim-01 by name: it takes the first row
    row = f"#node-table tr[data-node='{node.name}']"
    small_page.goto(base + "/")
    small_page.wait_for_function("() => window.gpulse && window.gpulse.frames > 0 && "
                                 "document.getElementById('heatmap').gpulseDrawn.z.length")
    small_page.evaluate("window.notReloaded = true")  # a reload would drop it
    small_page.focus("#node-order")
    small_page.keyboard.press("Tab")
    small_page.keyboard.press("ArrowRight")
    wait_picked(small_page, "sim-01 · GPU 1")
    node_page = small_page.context.new_page()  # the node's page, in a second tab of the same login
    node.thread.start()
    try:
        small_page.wait_for_function(f"() => ({PICKED})().rows[0] === '{node.name}'")
        assert small_page.evaluate(PICKED)["tip"].startswith("sim-01 · GPU 1")  # a row lower, the same GPU
        small_page.keyboard.press("ArrowUp")
        wait_picked(small_page, f"{node.name} · GPU 1")

        small_page.wait_for_selector(f"{row} .tag:has-text('clock skew −60 min')")
        small_page.wait_for_selector(f"{row} .status:text-is('up')")  # live: a late sample reads stale a moment
        assert "behind" in small_page.get_attribute(f"{row} .tag", "title")

        node.restart()
        with failing_on_script_errors(node_page):
            node_page.goto(f"{base}/nodes/{node.name}/")
            node_page.wait_for_function(
                "() => document.getElementById('node-restarts').textContent === 'collector restarted 1 time'"
            )
            node_page.wait_for_selector("#node-status:text-is('up')")
            assert "Clock skew −60 min" in node_page.text_content("#node-banner")
            node_page.wait_for_selector("#gpu-table tbody tr:nth-child(2)")
    finally:
        node.stop()
        node_page.close()

    small_page.wait_for_selector(f"{row}.row-down")
    assert small_page.text_content("#kpi-nodes") == "2"
    # Forgotten after FORGET_AFTER_S down (ingest looks every quarter of that): the row leaves, and the cell
    # in the forgotten row's place is picked, without a reload.
    small_page.wait_for_function(
        f"() => !document.querySelector(\"{row}\") && document.getElementById('kpi-nodes').textContent === '1'",
        timeout=(2 * FORGET_AFTER_S + 30) * 1000,
    )
    small_page.wait_for_function(f"() => ({PICKED})().rows.length === 1")
    picked = wait_picked(small_page, "sim-01 · GPU 1")
    assert picked["active"] == "heatmap" and picked["box"] is not None
    assert small_page.evaluate("window.notReloaded === true")  # the same page all along


USAGE_ROW = """(name) => {
  const drawn = document.getElementById("heatmap").gpulseDrawn;
  const r = Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent)
    .findIndex(t => t.startsWith(name));
  // null until the cells are drawn too: a new node's label can be on the page a frame before its row is.
  return r < 0 || !drawn.z[r] ? null : {r: r, z: drawn.z[r], text: drawn.text[r], range: [drawn.zmin, drawn.zmax],
    min: document.getElementById("scale-min").textContent, max: document.getElementById("scale-max").textContent};
}"""


def test_the_usage_heatmap_colours_an_allocated_idle_gpu_as_idle(small_system, small_page):
    # Real samples through ingest, which sets the frames' allocation flags: GPU 0 free,
    # GPU 1 dana's busy job, GPU 2 her job sitting idle below GPULSE_BUSY_UTIL (5 %).
    # Last in this module: its node stays in this system's pages until it is forgotten.
    job = {"pid": 4242, "name": "jupyter-lab", "user": "dana", "job": "41007", "mem_used": 2 << 30}
    client, keys = redis.Redis.from_url(small_system.redis_url), Keys()
    stopped = threading.Event()

    def collector():
        while not stopped.is_set():
            s = sample("usage-01", gpus=3)
            s["gpus"][1].update(util=90, processes=[job])
            s["gpus"][2].update(util=1, processes=[job])
            encoded = schema.encode(s)
            client.xadd(keys.telemetry_stream(s["node"]), {"s": encoded})
            client.set(keys.node(s["node"]), encoded, ex=node_ttl(1.0))
            stopped.wait(1.0)

    thread = threading.Thread(target=collector, daemon=True)
    thread.start()
    try:
        small_page.goto(small_system.url.rstrip("/") + "/")
        small_page.select_option("#heat-metric", "usage")
        small_page.wait_for_function(f"() => {{ const u = ({USAGE_ROW})('usage-01'); return u && u.z[2] === 2; }}")
        usage = small_page.evaluate(USAGE_ROW, "usage-01")
        assert usage["z"] == [0, 1, 2] and usage["range"] == [0, 2]
        # Painted light grey (free), green (busy), and the warning colour (idle) with its word.
        colours = [small_page.evaluate(CELL_COLOUR, [usage["r"], g]) for g in range(3)]
        assert colours == ["#eef0f3", "#74c476", "#f59e0b"]
        assert [cell.split("\n")[0] for cell in usage["text"]] == ["", "", "IDLE"]
        assert (usage["min"], usage["max"]) == ("not allocated", "idle")
        centre = small_page.evaluate(CELL_POSITION, [usage["r"], 2])
        small_page.mouse.move(centre["x"], centre["y"])
        small_page.wait_for_selector("#heat-tooltip:not([hidden])")
        assert "Usage: idle (allocated)" in small_page.text_content("#heat-tooltip")
    finally:
        stopped.set()
        thread.join()
        small_page.evaluate("localStorage.clear()")
