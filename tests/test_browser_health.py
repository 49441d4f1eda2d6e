"""Node health in headless Chromium against the whole running system (4 simulated nodes x 8 GPUs):
the /health/ page, the overview's Health column and heatmap mode, the node page's Health panel."""

import os
import re
import signal
import time
from contextlib import contextmanager
from datetime import UTC, datetime

import orjson
import pytest

from gpulse.health import BY_ID, CHECKS
from gpulse.keys import Keys

pytestmark = pytest.mark.browser

HEALTH_PAGE = """() => ({
  counts: document.getElementById("health-counts").textContent,
  empty: document.getElementById("health-empty").hidden ? null : document.getElementById("health-empty").textContent,
  rows: Array.from(document.querySelectorAll("#health-table tbody tr")).map(tr => ({
    node: tr.dataset.node, href: tr.querySelector("a").getAttribute("href"),
    cells: Array.from(tr.cells).map(td => td.textContent), since: tr.cells[5].title})),
})"""
OVERVIEW_HEALTH = """(name) => {
  const tr = document.querySelector(`#node-table tbody tr[data-node="${name}"]`);
  const badge = tr && tr.querySelector(".verdict");
  const drawn = document.getElementById("heatmap").gpulseDrawn;
  const labels = Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent);
  const row = labels.findIndex(t => t.startsWith(name));
  return badge && {verdict: badge.textContent, title: badge.title,
    label: row < 0 ? null : labels[row], z: row < 0 ? null : drawn.z[row], text: row < 0 ? null : drawn.text[row]};
}"""


@contextmanager
def ingest_held(system):
    """Stop ingest, so that frames the test writes are the only ones the browser gets."""
    ingest = system.process("ingest")
    os.kill(ingest.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(ingest.pid, signal.SIGCONT)


def send_delta(system, frame: dict) -> None:
    """Send one delta frame to every browser through the system's own channel layer, as ingest does."""
    text = orjson.dumps(frame).decode()
    system.stack.manage(
        "shell", "-c",
        "from asgiref.sync import async_to_sync; from channels.layers import get_channel_layer; "
        "from dashboard.live.publish import CLUSTER_GROUP; "
        f"async_to_sync(get_channel_layer().group_send)(CLUSTER_GROUP, {{'type': 'cluster.frame', 'text': {text!r}}})",
    )


def health(verdict: str, reason: str = "", since: float | None = None, findings: int = 1) -> dict:
    if verdict == "healthy":
        return {"verdict": verdict}
    return {"verdict": verdict, "reason": reason, "action": f"act on {reason}", "since": since, "findings": findings}


def test_the_health_page_lists_failing_then_degraded_longest_first_and_follows_each_frame(admin_page, running_system):
    client, keys = running_system.redis(), Keys()
    now = time.time()
    with ingest_held(running_system):
        snapshot = orjson.loads(client.get(keys.snapshot))
        verdicts = {
            "sim-01": health("degraded", "GPU 1 PCIe link: gen 4 of 5", now - 300),
            "sim-02": health("failing", "GPU 3 NVLink links: link 2 down, 17 up", now - 20),
            "sim-03": health("failing", "GPU count: 7 of 8", now - 600, findings=2),
            "sim-04": health("healthy"),
        }
        for name, entry in verdicts.items():
            snapshot["nodes"][name]["health"] = entry
        client.set(keys.snapshot, orjson.dumps(snapshot))
        admin_page.goto(running_system.base_url + "/health/")
        admin_page.wait_for_function(f"() => ({HEALTH_PAGE})().rows.length === 3")
        page = admin_page.evaluate(HEALTH_PAGE)
        assert page["counts"] == "0 down, 2 failing, 1 degraded, 1 healthy, 0 unknown"
        assert page["empty"] is None
        assert [row["node"] for row in page["rows"]] == ["sim-03", "sim-02", "sim-01"]
        first = page["rows"][0]
        assert first["href"] == "/nodes/sim-03/"
        assert first["cells"][1:5] == ["failing", "GPU count: 7 of 8", "act on GPU count: 7 of 8", "2"]
        assert first["cells"][5] == "10 min ago" and first["since"].endswith(" UTC")
        # The ages count on every second, in the same rows: a selected reason or a focused link stays.
        admin_page.evaluate("() => { document.querySelector('#health-table tbody tr').kept = true; }")
        admin_page.wait_for_timeout(1500)
        assert admin_page.evaluate("() => document.querySelector('#health-table tbody tr').kept") is True

        # One delta: sim-02 recovers, sim-04 degrades; the page follows within a frame.
        delta = {"type": "delta", "seq": snapshot["seq"] + 1, "sent": time.time(), "summary": {}, "nodes": {
            "sim-02": dict(snapshot["nodes"]["sim-02"], health=health("healthy")),
            "sim-04": dict(snapshot["nodes"]["sim-04"], health=health("degraded", "GPU 0 clock slowdown", now)),
        }}
        started = time.monotonic()
        send_delta(running_system, delta)
        admin_page.wait_for_function(
            f"() => ({HEALTH_PAGE})().counts === '0 down, 1 failing, 2 degraded, 1 healthy, 0 unknown'", timeout=15000
        )
        # Generous for a loaded machine: the page follows without a reload (3 s is the figure in PERFORMANCE.md).
        assert time.monotonic() - started < 15
        assert [row["node"] for row in admin_page.evaluate(HEALTH_PAGE)["rows"]] == ["sim-03", "sim-01", "sim-04"]

        healed = {"type": "delta", "seq": snapshot["seq"] + 2, "sent": time.time(), "summary": {}, "nodes": {
            name: dict(snapshot["nodes"][name], health=health("healthy")) for name in ("sim-01", "sim-03", "sim-04")
        }}
        send_delta(running_system, healed)
        admin_page.wait_for_function(f"() => ({HEALTH_PAGE})().empty === 'All 4 nodes healthy'", timeout=3000)
        assert admin_page.evaluate(HEALTH_PAGE)["rows"] == []
        assert admin_page.is_hidden("#health-table")



def test_the_health_page_lists_a_down_node_first_and_counts_it_as_down(admin_page, running_system):
    """Issue 32: with sim-050 dead, /health/ read "4 failing, 1 degraded, 244 healthy, 1 unknown" and its rows left
    sim-050 out. A node that stopped reporting is listed first, named down, since its latest sample."""
    client, keys = running_system.redis(), Keys()
    try:
        client.hset(keys.simulator_faults, "sim-04", "dead")
        deadline = time.monotonic() + 15
        while client.exists(keys.node("sim-04")):  # its latest sample expires: ingest calls it down
            assert time.monotonic() < deadline, "sim-04 still reporting"
            time.sleep(0.2)
        last_ts = orjson.loads(client.hget(keys.known_nodes, "sim-04"))["ts"]
        admin_page.goto(running_system.base_url + "/health/")
        admin_page.wait_for_function(f"() => ({HEALTH_PAGE})().rows.some(row => row.node === 'sim-04')")
        page = admin_page.evaluate(HEALTH_PAGE)
        first = page["rows"][0]
        assert first["node"] == "sim-04", page["rows"]
        assert first["cells"][1] == "down"
        assert first["cells"][2].startswith("no sample since 20"), first
        assert first["cells"][3].startswith("Check that the node is up and its collector runs")
        assert first["since"] == f"{datetime.fromtimestamp(last_ts, UTC):%Y-%m-%d %H:%M:%S} UTC"
        counts = re.fullmatch(r"1 down, (\d+) failing, (\d+) degraded, (\d+) healthy, 0 unknown", page["counts"])
        assert counts and sum(map(int, counts.groups())) == running_system.nodes - 1, page["counts"]
    finally:
        client.hdel(keys.simulator_faults, "sim-04")
    deadline = time.monotonic() + 15
    while not client.exists(keys.node("sim-04")):  # back for the tests that follow
        assert time.monotonic() < deadline, "sim-04 did not report again"
        time.sleep(0.2)


def test_the_overview_shows_each_verdict_in_the_table_and_the_health_heatmap(admin_page, running_system):
    client, keys = running_system.redis(), Keys()
    with ingest_held(running_system):
        snapshot = orjson.loads(client.get(keys.snapshot))
        for name in snapshot["nodes"]:
            snapshot["nodes"][name]["health"] = health("healthy")
        snapshot["nodes"]["sim-02"]["health"] = health("failing", "GPU 3 NVLink links: link 2 down, 17 up", time.time())
        snapshot["nodes"]["sim-03"]["health"] = health("degraded", "GPU 1 PCIe link: gen 4 of 5", time.time())
        client.set(keys.snapshot, orjson.dumps(snapshot))
        admin_page.goto(running_system.base_url + "/")
        admin_page.select_option("#heat-metric", "health")
        admin_page.wait_for_function(
            f"() => {{ const s = ({OVERVIEW_HEALTH})('sim-02'); return s && s.z && s.z[0] === 2; }}"
        )
        failing = admin_page.evaluate(OVERVIEW_HEALTH, "sim-02")
        degraded = admin_page.evaluate(OVERVIEW_HEALTH, "sim-03")
        healthy = admin_page.evaluate(OVERVIEW_HEALTH, "sim-01")
        # Sorted by health, worst first.
        admin_page.click('#node-table th[data-key="health"]')
        order = admin_page.evaluate(
            "() => Array.from(document.querySelectorAll('#node-table tbody tr')).map(tr => tr.dataset.node)"
        )
    assert failing["verdict"] == "failing"
    assert failing["title"].startswith("failing: GPU 3 NVLink links: link 2 down, 17 up\n→ act on GPU 3 NVLink")
    # Colour by verdict for every GPU, and the word in each cell and on the row label: never colour alone.
    # (A cell may add the GPU's own tags on a line of their own, "THR", from faults other tests left on the
    # shared fleet.)
    assert failing["z"] == [2] * 8 and [cell.split("\n")[0] for cell in failing["text"]] == ["FAIL"] * 8
    assert failing["label"] == "sim-02  ✖ failing"
    assert degraded["verdict"] == "degraded" and degraded["z"] == [1] * 8
    assert [cell.split("\n")[0] for cell in degraded["text"]] == ["DEGR"] * 8
    assert degraded["label"] == "sim-03  ⚠ degraded"
    assert healthy["verdict"] == "healthy" and healthy["z"] == [0] * 8 and healthy["label"] == "sim-01"
    assert admin_page.text_content("#scale-min") == "healthy" and admin_page.text_content("#scale-max") == "failing"
    assert order[:2] == ["sim-02", "sim-03"]


# The node table's rows and the heatmap's row labels (their node names), top first.
NODE_ORDER = """() => ({
  table: Array.from(document.querySelectorAll("#node-table tbody tr"), tr => tr.dataset.node),
  heatmap: Array.from(document.querySelectorAll("#heatmap .heat-row-label"), label => label.textContent.split(" ")[0]),
})"""


def test_problems_first_sorts_by_the_verdict_down_failing_degraded_then_the_rest(admin_page, running_system):
    """Issue 32: sim-180 (PCIe x8 of x16) and sim-222 (InfiniBand port down), both failing, stayed in name order
    under "problems first" while nodes with an alert ranked above them: the order read alert and fault flags only."""
    client, keys = running_system.redis(), Keys()
    with ingest_held(running_system):
        snapshot = orjson.loads(client.get(keys.snapshot))
        flags = snapshot["fields"].index("flags")
        nodes = snapshot["nodes"]
        for name in nodes:
            nodes[name]["health"] = health("healthy")
            for gpu in nodes[name]["gpus"]:
                gpu[flags] = 0
        nodes["sim-01"]["gpus"][0][flags] = 16  # an alert firing on a GPU of a healthy node (frames.js FLAG.ALERT)
        nodes["sim-02"]["health"] = health("degraded", "GPU 1 PCIe link: gen 4 of 5", time.time())
        nodes["sim-03"]["health"] = health("failing", "GPU 0 PCIe link: x8 of x16", time.time())
        down = {"verdict": "unknown", "reason": "node down", "since": time.time()}
        nodes["sim-04"].update(status="down", health=down,
                               gpus=[[None] * len(snapshot["fields"]) for _ in nodes["sim-04"]["gpus"]])
        client.set(keys.snapshot, orjson.dumps(snapshot))
        admin_page.goto(running_system.base_url + "/?order=problems")
        admin_page.wait_for_function(
            f"() => ({NODE_ORDER})().heatmap.length === 4 && ({NODE_ORDER})().table.length === 4")
        order = admin_page.evaluate(NODE_ORDER)
    assert order["table"] == ["sim-04", "sim-03", "sim-02", "sim-01"], order
    assert order["heatmap"] == order["table"]

HEALTH_ROW = """(name) => {
  const tr = document.querySelector(`#health-table tbody tr[data-node="${name}"]`);
  return tr && Array.from(tr.cells).map(td => td.textContent);
}"""
NODE_PANEL = """() => ({
  verdict: document.getElementById("health-verdict").textContent,
  checks: Array.from(document.querySelectorAll("#health-checks tbody tr")).map(tr => ({
    id: tr.dataset.check, cells: Array.from(tr.cells).map(td => td.textContent)})),
  history: Array.from(document.querySelectorAll("#health-history tbody tr")).map(
    tr => Array.from(tr.cells).map(td => td.textContent)),
})"""
NVLINK_ACTION = BY_ID["nvlink_state"].fail_action


def apply_fault(page, system, node: str, gpu: int, fault: str) -> None:
    """Inject (or clear) a fault from the Simulator page, as an operator does on the demo."""
    page.goto(f"{system.base_url}/alerts/simulator/")
    page.fill("#id_node", node)
    page.fill("#id_gpu", str(gpu))
    page.fill("#id_fault", fault)
    with page.expect_navigation():
        page.click("#fault-form button[type=submit]")
    active = page.locator("#faults").inner_text()
    assert (f"{node}/{gpu}" in active) == (fault != "clear"), active


def wait_left(deadline: float) -> float:
    """Milliseconds left until ``deadline`` (time.monotonic()), for wait_for_function."""
    return max(1.0, (deadline - time.monotonic()) * 1000)


def test_nvlink_down_on_one_gpu_fails_its_node_on_the_overview_and_health_page(
    admin_context, running_system
):
    base = running_system.base_url
    pages = [admin_context.new_page() for _ in range(4)]
    overview, health_page, node_page, operator = pages
    try:
        overview.goto(base + "/")
        health_page.goto(base + "/health/")
        overview.wait_for_function(
            f"() => {{ const s = ({OVERVIEW_HEALTH})('sim-02'); return s && s.verdict === 'healthy'; }}", timeout=30_000
        )
        health_page.wait_for_function(f"() => ({HEALTH_ROW})('sim-02') === null && "
                                      "/ healthy, /.test(document.getElementById('health-counts').textContent)")

        apply_fault(operator, running_system, "sim-02", 3, "nvlink_down")
        injected = time.monotonic()
        # The target is 3 s (docs/PERFORMANCE.md has the times this test prints); a loaded CI machine
        # once took longer, and a timed test is no benchmark, so this only proves the verdict arrives.
        deadline = injected + 15
        failing = f"() => ({OVERVIEW_HEALTH})('sim-02').verdict === 'failing'"
        overview.wait_for_function(failing, timeout=wait_left(deadline))
        health_page.wait_for_function(f"() => ({HEALTH_ROW})('sim-02') !== null", timeout=wait_left(deadline))
        failing_after = time.monotonic() - injected

        row = health_page.evaluate(HEALTH_ROW, "sim-02")
        assert row[1] == "failing"
        assert row[2].startswith("GPU 3 ") and "NVLink" in row[2] and "down" in row[2], row
        assert row[3] == NVLINK_ACTION
        title = overview.evaluate(OVERVIEW_HEALTH, "sim-02")["title"]
        assert title.startswith("failing: " + row[2] + "\n→ " + NVLINK_ACTION), title

        # The node page's panel: the failing check with its GPU and action, and the change in its history.
        node_page.goto(base + "/nodes/sim-02/")
        node_page.wait_for_function(f"() => ({NODE_PANEL})().verdict === 'failing'")
        panel = node_page.evaluate(NODE_PANEL)
        first = panel["checks"][0]
        assert first["id"] == "nvlink_state" and first["cells"][:3] == ["NVLink links", "3", "fail"], panel["checks"]
        assert first["cells"][4] == NVLINK_ACTION
        assert [c["cells"][2] for c in panel["checks"] if c["id"] == "pcie_link"] == ["pass"]
        passed = [c["id"] for c in panel["checks"] if c["cells"][2] == "pass"]
        assert passed == [check.id for check in CHECKS if check.id in passed]  # in the catalogue's order
        assert panel["history"][0][1:3] == ["healthy", "failing"], panel["history"]

        apply_fault(operator, running_system, "sim-02", 3, "clear")
        cleared = time.monotonic()
        overview.wait_for_function(f"() => ({OVERVIEW_HEALTH})('sim-02').verdict === 'healthy'", timeout=10_000)
        health_page.wait_for_function(f"() => ({HEALTH_ROW})('sim-02') === null", timeout=10_000)
        healthy_after = time.monotonic() - cleared
        # Reloaded on the change in the node's live findings, not only by the 10 s refresh.
        node_page.wait_for_function(f"() => ({NODE_PANEL})().verdict === 'healthy'", timeout=4_000)
        assert node_page.evaluate(NODE_PANEL)["history"][0][1:3] == ["failing", "healthy"]
        print(f"nvlink_down: failing on both pages {failing_after:.2f} s after injection, "
              f"healthy {healthy_after:.2f} s after clearing")
    finally:
        running_system.redis().hdel(Keys().simulator_faults, "sim-02/3")
        for page in pages:
            page.close()
