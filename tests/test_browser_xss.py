"""Hostile values in every field the pages show run nothing in an admin's browser.

A GPU node writes its own samples, so a compromised node controls every string
in them: node names, GPU index, model, processes, throttle reasons, Xid codes,
probe records. These tests write such values straight into what the web reads
(the node key, the snapshot frame, probe history, job events, alert rows), as
a hostile node would get them there if ingest's validation missed one, and
check that nothing executes, no element is injected, and a strict
Content-Security-Policy comes with every page without blocking our own code.
"""

import json
import os
import signal
import time
from urllib.parse import quote

import orjson
import pytest

from collectors.probe import publish_probe
from gpulse import job_events
from gpulse.keys import Keys
from tests.browser import CELL_POSITION, HEATMAP

pytestmark = pytest.mark.browser

# Each payload, if it ran, would set window.__pwned, open a dialog or leave an element behind.
SCRIPT = "<script>window.__pwned='script'</script>"
IMG = "<img src=x class=pwned onerror=\"window.__pwned='img';alert(1)\">"
LINK = '<a href="https://evil.example/" class="pwned">x</a>'
HREF_JS = "<a href=\"javascript:window.__pwned='href'\" class=pwned>click</a>"
SVG = "<svg onload=\"window.__pwned='svg'\" class=pwned></svg>"
HOSTILE = IMG + SCRIPT + LINK
# Node names travel in URLs; Django's <str:> converter takes no slash.
OVERVIEW_NODE = LINK
PAGE_NODE = "<img src=x class=pwned onerror=window.__pwned=1>"

INJECTED = """() => ({
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  elements: Array.from(document.querySelectorAll(
    ".pwned, img[src='x'], a[href^='https://evil'], a[href^='javascript'], "
    + "main script:not([type='application/json']), svg script"
  )).map(e => e.outerHTML.slice(0, 120)),
})"""


@pytest.fixture
def watched_page(admin_page):
    """The admin's page, recording dialogs and Content-Security-Policy reports."""
    admin_page.dialogs, admin_page.csp_reports = [], []
    admin_page.on("dialog", lambda dialog: (admin_page.dialogs.append(dialog.message), dialog.dismiss()))
    admin_page.on("console", lambda message: "Content Security Policy" in message.text
                  and admin_page.csp_reports.append(message.text[:60] + str(message.location)))
    return admin_page


def open_checked(page, url: str, ready: str, scroll_to: str | None = None) -> None:
    """Open ``url``, keep its Content-Security-Policy header, scroll to ``scroll_to`` (a selector; the node
    page draws only the charts near the screen) and wait for ``ready`` (JS)."""
    response = page.goto(url)
    page.policy = response.headers.get("content-security-policy", "")
    if scroll_to:
        page.locator(scroll_to).scroll_into_view_if_needed()
    page.wait_for_function("() => " + ready)
    page.wait_for_timeout(1500)  # let timers, hovers and a few frames run


def assert_nothing_ran(page) -> None:
    found = page.evaluate(INJECTED)
    assert found == {"pwned": None, "elements": []}, found
    assert page.dialogs == []
    directives = dict(d.strip().split(" ", 1) for d in page.policy.split(";") if d.strip())
    assert directives.get("script-src") == "'self'", page.policy
    assert directives.get("object-src") == "'none'" and directives.get("frame-ancestors") == "'none'", page.policy
    assert page.csp_reports == [], page.csp_reports  # our own scripts and styles are all allowed


def hostile_gpu(gpu: dict) -> dict:
    """A copy of a real sample's GPU with HTML in every string field."""
    return dict(
        gpu, index=PAGE_NODE, name=HOSTILE, uuid=HOSTILE, throttle=[HOSTILE, "sw_power_cap"],
        xid=[HOSTILE, {"code": IMG}],
        processes=[{"pid": IMG, "user": HOSTILE, "name": SVG, "mem_used": 1 << 30, "job": IMG,
                    "cmd": "\" onmouseover=\"window.__pwned='title'\" " + HOSTILE}],
    )


def test_hostile_node_values_run_nothing_on_the_node_page(watched_page, running_system):
    client, keys = running_system.redis(), Keys()
    sample = orjson.loads(client.get(keys.node("sim-01")))
    sample.update(node=PAGE_NODE, ts=time.time(), interval=60.0, gpus=[hostile_gpu(g) for g in sample["gpus"]])
    probe = {"v": 1, "node": PAGE_NODE, "ts": time.time() - 60, "backend": HOSTILE, "world_size": IMG,
             "max_bytes": 1 << 20, "busbw": None, "avg_busbw": None, "wrong": IMG, "status": HREF_JS,
             "reason": HOSTILE, "duration_s": 1.0}
    client.set(keys.node(PAGE_NODE), orjson.dumps(sample), ex=600)
    client.hset(keys.known_nodes, PAGE_NODE, json.dumps({"ts": sample["ts"], "interval": 60.0}))
    publish_probe(client, keys, probe)
    # The probe contract refuses most of that probe (a node name, a status, numbers): what
    # it lets through as text (backend, reason) goes, with HTML in it, to a valid node.
    readable = dict(probe, node="sim-02", backend=IMG, world_size=8, wrong=0, status="failed")
    # sim-02's earlier probes go, so that none sits a pixel from the test's where the pointer goes (a probe
    # running now was taken well after it).
    client.delete(keys.probe_history("sim-02"))
    # sim-02's collector probes every 600 s: one of its own, taken after the test's but written before it, as
    # a slow probe is. The chart must still put the pointer on the test's (CI: the history's order drew it).
    newer = dict(readable, backend="gloo", reason="timed out", ts=readable["ts"] + 30)
    publish_probe(client, keys, newer)
    publish_probe(client, keys, readable)
    try:
        url = f"{running_system.base_url}/nodes/{quote(PAGE_NODE, safe='')}/"
        open_checked(watched_page, url, "document.querySelectorAll('#gpu-table tbody tr').length === 8")
        # The hostile strings are shown as text, not dropped.
        assert PAGE_NODE in watched_page.text_content("#gpu-table tbody")
        assert SVG in watched_page.text_content("#proc-table tbody")
        assert IMG in watched_page.text_content("#proc-table .proc-job")
        assert_nothing_ran(watched_page)
        open_checked(watched_page, f"{running_system.base_url}/nodes/sim-02/",
                     "document.getElementById('probe-chart').timeChart.uplot",
                     scroll_to="#probe-chart:not([hidden])")
        # The probe chart's tooltip says each probe, its backend among it: the pointer on this one, not on
        # sim-02's own.
        plot = watched_page.locator("#probe-chart .u-over").bounding_box()
        x = watched_page.evaluate("(ts) => document.getElementById('probe-chart').timeChart.uplot.valToPos(ts, 'x')",
                                  readable["ts"])
        watched_page.mouse.move(plot["x"] + x, plot["y"] + plot["height"] / 2)
        watched_page.wait_for_function("(img) => document.querySelector('#probe-chart .chart-tooltip').textContent"
                                       ".includes(img)", arg=IMG)
        assert_nothing_ran(watched_page)
    finally:
        client.delete(keys.node(PAGE_NODE), keys.probe_history(PAGE_NODE))
        for published in (readable, newer):  # as publish_probe wrote them
            client.lrem(keys.probe_history("sim-02"), 0, json.dumps(published))
        client.hdel(keys.known_nodes, PAGE_NODE)


def test_hostile_snapshot_runs_nothing_on_the_overview(watched_page, running_system):
    client, keys = running_system.redis(), Keys()
    ingest = running_system.process("ingest")
    # Held, so its next tick does not overwrite the hostile snapshot before the browser reads it.
    os.kill(ingest.pid, signal.SIGSTOP)
    try:
        snapshot = orjson.loads(client.get(keys.snapshot))
        real = next(iter(snapshot["nodes"].values()))
        hostile_row = [HOSTILE, IMG, 50, 300, 1500, 0]
        for name, status in ((OVERVIEW_NODE, "up"), (PAGE_NODE, HOSTILE), (SVG, "stale")):
            snapshot["nodes"][name] = dict(
                real, status=status, gpus=[hostile_row] + real["gpus"][1:],
                meta=[[HOSTILE, IMG, SVG]] * len(real["gpus"]),
                probe={"busbw": IMG, "median": HOSTILE, "low": True, "status": HREF_JS, "ts": time.time()},
            )
        snapshot["summary"]["latest_busbw"] = {"busbw": 3.0, "previous": 2.0, "nodes": HOSTILE}
        client.set(keys.snapshot, orjson.dumps(snapshot))
        open_checked(watched_page, running_system.base_url + "/",
                     "document.getElementById('heatmap').gpulseDrawn.z.length"
                     " && document.querySelectorAll('#node-table tbody tr').length >= 7")
        labels = watched_page.evaluate(HEATMAP)["labels"]
        assert any("evil.example" in label for label in labels)  # there, but as text
        assert "evil.example" in watched_page.text_content("#heatmap .heat-rows")
        # Hover every hostile row so the tooltip renders its model, probe and name.
        for row in range(len(snapshot["nodes"])):
            spot = watched_page.evaluate(CELL_POSITION, [row, 0])
            watched_page.mouse.move(spot["x"], spot["y"], steps=2)
        watched_page.wait_for_selector("#heat-tooltip:not([hidden])")
        assert_nothing_ran(watched_page)
    finally:
        os.kill(ingest.pid, signal.SIGCONT)


def test_hostile_alert_and_job_values_run_nothing(watched_page, running_system):
    client, keys = running_system.redis(), Keys()
    created = running_system.stack.manage(
        "shell", "-c",
        "import json, sys\n"
        "from django.utils import timezone\n"
        "from dashboard.alerts.models import Alert, Rule\n"
        "from dashboard.benchmarks.models import BenchmarkJob\n"
        f"hostile, node = {HOSTILE!r}, {PAGE_NODE!r}\n"
        "rule, _ = Rule.objects.get_or_create(name='xss ' + hostile[:60],"
        " defaults={'metric': 'temp', 'threshold': 1})\n"
        "Alert.objects.update_or_create(fingerprint='xss0000000000000', defaults=dict(rule=rule, node=node,"
        " gpu=0, status='firing', status_since=timezone.now(), fired_at=timezone.now(), value=99))\n"
        "rows = [dict(size=1024, count=256, type=hostile, redop=hostile, time_us=1.0, algbw=1.0, busbw=1.0,"
        " wrong=0, inplace=False)]\n"
        "result = {'rows': rows, 'backend': hostile, 'versions': {hostile: {'torch': hostile}, 'x': hostile}}\n"
        "done, other = (BenchmarkJob.objects.create(nodes=[hostile], ranks_per_node=1, min_bytes=1024,"
        " max_bytes=1024, status='succeeded', reason=hostile, result=result) for _ in range(2))\n"
        "live = BenchmarkJob.objects.create(nodes=[hostile], ranks_per_node=1, min_bytes=1024, max_bytes=1024,"
        " status='running', reason=hostile)\n"
        "print(json.dumps([done.pk, other.pk, live.pk]))\n",
    )
    done, other, live = json.loads(created.strip().splitlines()[-1])
    job_events.emit(client, keys, live, {"kind": "row", "row": {
        "size": 2048, "count": IMG, "type": HOSTILE, "redop": SVG, "time_us": 1.0, "algbw": 1.0, "busbw": 1.0,
        "wrong": IMG, "inplace": False}})
    try:
        open_checked(watched_page, running_system.base_url + "/alerts/", "document.body")
        assert PAGE_NODE in watched_page.text_content("main")
        assert_nothing_ran(watched_page)
        open_checked(watched_page, f"{running_system.base_url}/benchmarks/{live}/",
                     "document.querySelectorAll('#rows tbody tr').length === 1")
        assert_nothing_ran(watched_page)
        open_checked(watched_page, f"{running_system.base_url}/benchmarks/{done}/", "document.body")
        assert HOSTILE in watched_page.text_content("#versions")
        assert_nothing_ran(watched_page)
        open_checked(watched_page, f"{running_system.base_url}/benchmarks/compare/?id={done}&id={other}",
                     "document.querySelector('#compare-chart .scatterlayer .trace')")
        assert HOSTILE in watched_page.text_content("#compare-jobs")
        name = watched_page.evaluate("document.getElementById('compare-chart').data[0].name")
        assert "evil.example" in name and "<" not in name, name  # escaped for Plotly's pseudo-HTML
        assert_nothing_ran(watched_page)
        open_checked(watched_page, f"{running_system.base_url}/benchmarks/", "document.body")
        watched_page.wait_for_timeout(2500)  # one refresh of the job statuses
        assert_nothing_ran(watched_page)
    finally:
        client.delete(keys.job_events(live))
        running_system.stack.manage(
            "shell", "-c",
            "from dashboard.alerts.models import Alert, Rule\n"
            "from dashboard.benchmarks.models import BenchmarkJob\n"
            "Alert.objects.filter(fingerprint='xss0000000000000').delete()\n"
            "Rule.objects.filter(name__startswith='xss ').delete()\n"
            f"BenchmarkJob.objects.filter(pk__in=[{done}, {other}, {live}]).delete()\n",
        )


def test_hostile_health_reasons_run_nothing_on_the_health_overview_and_node_pages(watched_page, running_system):
    client, keys = running_system.redis(), Keys()
    now = time.time()
    ingest = running_system.process("ingest")
    # Held, so its next tick does not overwrite the hostile verdicts before the browser reads them.
    os.kill(ingest.pid, signal.SIGSTOP)
    try:
        snapshot = orjson.loads(client.get(keys.snapshot))
        for entry in snapshot["nodes"].values():  # faults other tests left on the shared fleet: not listed
            entry["health"] = {"verdict": "healthy"}
        snapshot["nodes"]["sim-01"]["health"] = {"verdict": "failing", "reason": HOSTILE, "action": IMG,
                                                 "since": now - 60, "findings": 1}
        snapshot["nodes"]["sim-02"]["health"] = {"verdict": "degraded", "reason": SVG + HREF_JS, "action": LINK,
                                                 "since": now, "findings": 1}
        client.set(keys.snapshot, orjson.dumps(snapshot))
        open_checked(watched_page, running_system.base_url + "/health/",
                     "document.querySelectorAll('#health-table tbody tr').length === 2")
        assert HOSTILE in watched_page.text_content("#health-table tbody")  # shown, as text
        assert_nothing_ran(watched_page)
        open_checked(watched_page, running_system.base_url + "/",
                     "document.querySelector('#node-table .verdict-failing')"
                     " && document.getElementById('heatmap').gpulseDrawn.z.length")
        assert HOSTILE in watched_page.get_attribute("#node-table .verdict-failing", "title")
        watched_page.select_option("#heat-metric", "health")
        spot = watched_page.evaluate(CELL_POSITION, [0, 0])
        watched_page.mouse.move(spot["x"], spot["y"], steps=2)
        watched_page.wait_for_selector("#heat-tooltip:not([hidden])")
        assert HOSTILE in watched_page.text_content("#heat-tooltip")
        assert_nothing_ran(watched_page)
    finally:
        os.kill(ingest.pid, signal.SIGCONT)

    # The node page's Health panel: a hostile node's reasons in its checks and its verdict history.
    sample = orjson.loads(client.get(keys.node("sim-01")))
    sample.update(node=PAGE_NODE, ts=time.time(), interval=60.0)
    record = {"verdict": "failing", "since": now - 60, "checked": ["nvlink_state", "pcie_link"],
              "findings": [{"check": "nvlink_state", "gpu": 3, "status": "fail", "reason": HOSTILE, "action": IMG,
                            "since": now - 60}]}
    client.set(keys.node(PAGE_NODE), orjson.dumps(sample), ex=600)
    client.hset(keys.known_nodes, PAGE_NODE, json.dumps({"ts": sample["ts"], "interval": 60.0}))
    client.hset(keys.health, PAGE_NODE, orjson.dumps(record))
    changes = ("from dashboard.health.models import HealthChange as H\n"
               f"H.objects.filter(node={PAGE_NODE!r}).delete()\n")
    running_system.stack.manage("shell", "-c", changes + "from django.utils import timezone\n"
                                f"H.objects.create(node={PAGE_NODE!r}, at=timezone.now(), old='healthy', new='failing',"
                                f" reason={SVG + HOSTILE!r})\n")
    try:
        open_checked(watched_page, f"{running_system.base_url}/nodes/{quote(PAGE_NODE, safe='')}/",
                     "document.querySelector('#health-checks tbody tr[data-check=\"nvlink_state\"]')"
                     " && document.querySelectorAll('#health-history tbody tr').length === 1")
        assert HOSTILE in watched_page.text_content("#health-checks tbody")
        assert SVG + HOSTILE in watched_page.text_content("#health-history tbody")
        assert_nothing_ran(watched_page)
    finally:
        client.delete(keys.node(PAGE_NODE))
        client.hdel(keys.known_nodes, PAGE_NODE)
        client.hdel(keys.health, PAGE_NODE)
        running_system.stack.manage("shell", "-c", changes)
