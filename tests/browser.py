"""Headless Chromium for the browser tests: Debian's chromium driven by Playwright.

`playwright install` downloads its own browsers from the internet, which many
clusters (and CI hosts) cannot reach, so the tests drive /usr/bin/chromium
(`make browser` installs it). A pytest plugin: list it in ``pytest_plugins``.

Pages send a Content-Security-Policy without 'unsafe-eval', which the tests
keep enforced: give ``wait_for_function`` a function ("() => ..."), since an
expression string is eval'd inside the page and the policy refuses that.
"""

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from devtools.loadtest.browser import CHROMIUM as BROWSER_BINARY
from devtools.loadtest.browser import CHROMIUM_ARGS, VIEWPORT
from gpulse.keys import Keys

CHROMIUM = Path(BROWSER_BINARY)

# The overview's heatmap as heatmap.js drew it (null before its first drawing): z and cell text by row on
# screen, the scale's range, the fault outlines' cells, and the row labels' text.
HEATMAP = """() => {
  const gd = document.getElementById("heatmap"), drawn = gd.gpulseDrawn;
  if (!drawn || !drawn.z.length) return null;
  return {z: drawn.z, text: drawn.text, zmin: drawn.zmin, zmax: drawn.zmax, faults: drawn.faults,
          labels: Array.from(gd.querySelectorAll(".heat-row-label"), label => label.textContent)};
}"""
# The overview has taken a frame and drawn its heatmap.
OVERVIEW_DRAWN = ("() => window.gpulse && window.gpulse.frames > 0"
                  " && document.getElementById('heatmap').gpulseDrawn.z.length")
# The centre of a heatmap cell (row on screen, GPU), in the window's coordinates.
CELL_POSITION = """([row, gpu]) => {
  const drawn = document.getElementById("heatmap").gpulseDrawn;
  const box = document.querySelector("#heatmap .heat-cells").getBoundingClientRect();
  return {x: box.left + (gpu + 0.5) * box.width / drawn.z[0].length,
          y: box.top + (row + 0.5) * box.height / drawn.z.length};
}"""
# The colour painted in a heatmap cell ("#rrggbb"), read from the canvas near the cell's top left corner,
# away from its text, the lines between cells and a fault's outline.
CELL_COLOUR = """([row, gpu]) => {
  const canvas = document.querySelector("#heatmap .heat-cells"), drawn = document.getElementById("heatmap").gpulseDrawn;
  const x = Math.floor((gpu + 0.12) * canvas.width / drawn.z[0].length);
  const y = Math.floor((row + 0.2) * canvas.height / drawn.z.length);
  const pixel = canvas.getContext("2d").getImageData(x, y, 1, 1).data;
  return "#" + Array.from(pixel.slice(0, 3), c => c.toString(16).padStart(2, "0")).join("");
}"""
# The no-data hatch's two colours (gpulse.css --nodata, --nodata-stripe; the light theme).
HATCH_COLOURS = {"#c3c9d1", "#9aa3ad"}


@pytest.fixture(scope="module")
def chromium() -> Browser:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make browser)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextmanager
def failing_on_script_errors(page: Page) -> Iterator[Page]:
    """Yield ``page``; at the end, fail on any error its scripts threw and nobody caught (an overview
    drawing that threw on a model not yet laid out once went unnoticed: its test still passed)."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{error}\n{error.stack}"))
    yield page
    assert not errors, f"the page's scripts threw: {errors}"


@pytest.fixture
def browser_page(chromium) -> Page:
    """A fresh page in its own context: no cookies, no local storage from other tests."""
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        with failing_on_script_errors(page):
            yield page
    finally:
        context.close()


# A job's page says the job has ended, however it ended.
JOB_ENDED = ("() => ['succeeded', 'failed', 'timed_out', 'cancelled']"
             ".includes(document.querySelector('#job-status').textContent.trim())")


def launch_finished_job(page: Page, base_url: str, op: str = "all_reduce", nodes: list[str] | None = None,
                        max_bytes: str = "4K") -> str:
    """Launch a small gloo benchmark of ``op`` on ``nodes`` (default: the first free node) from the
    Benchmarks page, wait until it has ended, and return its page's path."""
    page.goto(f"{base_url}/benchmarks/")
    page.select_option("#id_op", op)
    if nodes is None:
        page.locator("#node-picker input[name=nodes]:enabled").first.check()
    for node in nodes or ():
        page.check(f"#node-picker input[value='{node}']")
    page.fill("#id_ranks_per_node", "1")
    page.select_option("#id_backend", "gloo")
    page.fill("#id_min_bytes", "1K")
    page.fill("#id_max_bytes", max_bytes)
    confirm = page.locator("#id_confirm_held")  # shown while a simulated job holds a node's GPUs
    if confirm.is_visible():
        confirm.check()
    with page.expect_navigation():
        page.click("#launch-form button[type=submit]")
    job = re.search(r"/benchmarks/\d+/$", page.url).group(0)
    page.wait_for_function(JOB_ENDED, timeout=90_000)
    return job


def log_in(page: Page, base_url: str, username: str, password: str, next_path: str = "/") -> None:
    """Log in through the login form and land on ``next_path``."""
    page.goto(f"{base_url}/accounts/login/?next={next_path}")
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', password)
    with page.expect_navigation():
        page.click('button[type="submit"]')
    if "/accounts/login/" in page.url:
        raise AssertionError(f"logging in as {username!r} failed: still on {page.url}")


@contextmanager
def logged_in_page(chromium: Browser, base_url: str, username: str, password: str, timeout_ms: float = 15_000,
                   init_script: str | None = None, next_path: str = "/healthz") -> Iterator[Page]:
    """A page in a context of its own, logged in to ``base_url`` (a system a test module started for itself),
    ``init_script`` run in each of its documents before the page's own scripts."""
    context = chromium.new_context(viewport=VIEWPORT)
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    try:
        with failing_on_script_errors(page):
            log_in(page, base_url, username, password, next_path)
            yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def admin_context(chromium, running_system) -> BrowserContext:
    """One context logged in to the running system as its admin, for a whole module:
    its HTTP cache keeps the 1.1 MB Plotly.js bundle from loading once per test."""
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    log_in(page, running_system.base_url, running_system.username, running_system.password, "/healthz")
    page.close()
    yield context
    context.close()


@pytest.fixture
def admin_page(admin_context) -> Page:
    page = admin_context.new_page()
    page.set_default_timeout(15_000)
    try:
        with failing_on_script_errors(page):
            yield page
    finally:
        page.evaluate("localStorage.clear()")  # choices a test made (heatmap metric) must not leak into the next
        page.close()


SWEEP_NODES = ["sim-01", "sim-02", "sim-03", "sim-04"]


def finished_sweep(stack, slow: str | None, busbw: float) -> int:
    """A finished sweep over SWEEP_NODES as sweeps._judge records one, ``slow``'s links at a tenth of the others
    (None: every link alike)."""
    links = [{"a": a, "b": b, "busbw": busbw / 10 if slow in (a, b) else busbw}
             for i, a in enumerate(SWEEP_NODES) for b in SWEEP_NODES[i + 1:]]
    result = {"links": links, "failed": [], "median": busbw, "slow_nodes": [] if slow is None else [slow],
              "slow_links": [[link["a"], link["b"]] for link in links if slow in (link["a"], link["b"])],
              "node_medians": {node: busbw / 10 if node == slow else busbw for node in SWEEP_NODES}}
    create = ("import json; from django.utils import timezone; from dashboard.benchmarks.models import FabricSweep;"
              f" print(FabricSweep.objects.create(nodes={SWEEP_NODES!r}, rounds=[], round=3, size_bytes=1 << 20,"
              " status='succeeded', started=timezone.now(), finished=timezone.now(),"
              f" result=json.loads({json.dumps(json.dumps(result))})).pk)")
    return int(stack.manage("shell", "-c", create).splitlines()[-1])


def finished_gpu_check(stack) -> int:
    """A finished GPU check run as the reaper records one: sim-02 unhealthy (a link at x8, a matmul below its
    floor), sim-03 could not be checked."""
    tests = [{"name": "memory_bandwidth", "gpu": 0, "value": 3891.2, "unit": "GB/s", "verdict": "pass",
              "reason": "3891.2 GB/s, 81 % of the H100 SXM's 4800 GB/s"},
             {"name": "matmul_bf16", "gpu": 0, "value": 301.5, "unit": "TFLOPS", "verdict": "fail",
              "reason": "301.5 TFLOPS, 30 % of the H100 SXM's 989.4 TFLOPS dense bf16 peak, below its 50 % floor"}]
    findings = [{"check": "pcie_link", "gpu": 0, "status": "fail", "reason": "x8 of x16 lanes, Gen5 of Gen5"},
                {"check": "matmul_bf16", "gpu": 0, "status": "fail", "reason": tests[1]["reason"]}]
    results = {"sim-02": {"status": "succeeded", "reason": "",
                          "report": {"exit": 1, "gpus": 8, "seconds": 14.2, "findings": findings, "tests": tests}},
               "sim-03": {"status": "failed", "report": None,
                          "reason": "gpulse healthcheck could not check: NVML: cannot load libnvidia-ml.so.1"}}
    create = ("import json; from django.utils import timezone; from dashboard.benchmarks.models import GpuCheckRun;"
              " print(GpuCheckRun.objects.create(nodes=['sim-02', 'sim-03'], status='failed',"
              " reason='sim-03: gpulse healthcheck could not check', started=timezone.now(),"
              f" finished=timezone.now(), results=json.loads({json.dumps(json.dumps(results))})).pk)")
    return int(stack.manage("shell", "-c", create).splitlines()[-1])


@contextmanager
def passed_afterwards(running_system, timeout: float = 60.0) -> Iterator[None]:
    """Run the block (which records sweeps with a slow node), then a sweep every node passes, and wait until
    no node fails the fabric check: ingest holds a sweep's findings until a later one passes them (issue
    38), and the session's later tests expect a healthy fleet."""
    try:
        yield
    finally:
        finished_sweep(running_system.stack, None, 1.5)
        deadline = time.monotonic() + timeout
        client = running_system.redis()
        try:
            while any(b'"check":"fabric"' in record for record in client.hvals(Keys().health)):
                assert time.monotonic() < deadline, "a node still fails the fabric check after a sweep it passed"
                time.sleep(0.5)
        finally:
            client.close()
