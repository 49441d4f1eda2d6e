"""Long tasks in headless Chromium on gpulse's pages at 2,000 GPUs (issue 18).

    .venv/bin/python -m devtools.bench_browser_longtasks [--nodes 250] [--gpus-per-node 8] [--seconds 20]
        [--cpu-slowdown 1] [--json]

It starts the real pipeline with a simulated fleet sampled at 1 Hz (the load
test's LoadSystem: Redis, web, ingest, collectors), logs Chromium in, and runs
each scenario for --seconds on a page of its own while PerformanceObservers
record the page's long tasks (main-thread tasks over 50 ms, when the page
cannot answer a click or a key) and its blocking animation frames (frames
holding such a task, rendering counted with their longest). Chromium's
`longtask` entries miss a page's first tasks (a 300 ms script run as the page
is parsed is never reported), its `long-animation-frame` entries do not, so a
scenario meets the target only with neither: none at all. Those milliseconds
are the machine's: machine_ms, a fixed script timed first in the same browser,
says how fast it was, so runs on two machines can be compared. --cpu-slowdown N
runs the pages N times slower (Chromium's CPU throttling, as DevTools offers):
how much room is left under the target, on a machine too fast to show it.

The observer is an init script: the browser runs it in every document before
the page's own scripts, and the page's Content-Security-Policy does not apply
to it (an inline <script> would be refused). The pages' policy stays enforced:
any violation it reports is listed in the result.
"""

import argparse
import os
import signal
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import orjson

from collectors.arguments import positive_float, positive_int
from devtools.loadtest.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from devtools.loadtest.system import LoadSystem

if TYPE_CHECKING:  # Playwright is imported where the browser starts
    from playwright.sync_api import BrowserContext, Page

TARGET_MS = 50.0


class Found(TypedDict):
    """What a scenario's page reported: its long tasks' durations, its blocking frames' blocking times (ms)."""

    tasks: list[float]
    blocking: list[float]


# Entries keep their start, so a window reads only its own (they arrive a little after their task). A
# frame's blockingDuration is the time its long tasks ran past 50 ms: above 0, it held one.
OBSERVE = """(() => {
  const tasks = (window.gpulseLongTasks = []);
  const frames = (window.gpulseBlockingFrames = []);
  const refused = (window.gpulseCspViolations = []);
  document.addEventListener("securitypolicyviolation", (e) => refused.push(e.violatedDirective + " " + e.blockedURI));
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) tasks.push({ start: entry.startTime, ms: entry.duration });
  }).observe({ type: "longtask", buffered: true });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (entry.blockingDuration > 0) frames.push({ start: entry.startTime, ms: entry.blockingDuration });
    }
  }).observe({ type: "long-animation-frame", buffered: true });
})();"""
NOW = "() => performance.now()"
FOUND = """([since, until]) => {
  const within = (list) => list.filter((e) => e.start >= since && e.start < (until ?? Infinity)).map((e) => e.ms);
  return { tasks: within(window.gpulseLongTasks), blocking: within(window.gpulseBlockingFrames) };
}"""
REFUSED = "() => window.gpulseCspViolations.slice()"
# A fixed script, timed in a blank page of the same Chromium before the scenarios: the machine's speed, so
# that runs on different machines compare (long tasks are milliseconds of this machine: the same tree gave
# almost none on one machine and several in every scenario on a slower one, docs/PERFORMANCE.md). Its
# result is used, so V8 cannot drop the loops.
MACHINE_SPEED = """() => {
  const start = performance.now();
  let sum = 0;
  for (let i = 0; i < 5e7; i++) sum += i % 7;
  const rows = [];
  for (let i = 0; i < 5e5; i++) rows.push({ x: i, label: String(i) });
  return [performance.now() - start, sum + rows.length];
}"""
# The overview has drawn every node and taken a few deltas since: its steady state.
OVERVIEW_READY = """(nodes) => window.gpulse && window.gpulse.frames >= 3 &&
  document.getElementById("node-count").textContent.startsWith(nodes + " nodes")"""


class Bench:
    """One logged-in browser context on the running system; each scenario opens pages in it."""

    def __init__(self, context: "BrowserContext", url: str, nodes: int, seconds: float, cpu_slowdown: float = 1.0):
        self.context = context
        self.url = url
        self.nodes = nodes
        self.seconds = seconds
        self.cpu_slowdown = cpu_slowdown
        self.node_name = ""  # a node of the fleet, read from the overview's table
        self.refused: list[str] = []

    def open(self, path: str) -> "Page":
        page = self.context.new_page()
        page.set_default_timeout(60_000)
        if self.cpu_slowdown != 1:
            # Set through the page's own DevTools session, which stays attached until the page closes.
            self.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": self.cpu_slowdown})
        page.goto(self.url + path)
        if page.evaluate("() => window.gpulseLongTasks === undefined"):
            raise RuntimeError(f"the long-task observers did not run on {path}")
        return page

    def open_overview(self) -> "Page":
        page = self.open("/")
        # A function, not an expression: Playwright evaluates an expression with eval, which the CSP refuses.
        page.wait_for_function(OVERVIEW_READY, arg=self.nodes)
        return page

    def reported(self, page: "Page", since: float, until: float | None = None) -> Found:
        """The page's long tasks' durations and its blocking frames' blocking times, of those that started in
        [since, until) (ms of its clock)."""
        # A task that ended just now is reported by the observers a moment later.
        page.wait_for_timeout(200)
        return page.evaluate(FOUND, [since, until])

    def close(self, page: "Page") -> None:
        self.refused += page.evaluate(REFUSED)
        page.close()

    def overview_idle(self) -> dict[str, Found]:
        """The overview loading (to its third frame with every node), then left alone."""
        page = self.open_overview()
        ready = page.evaluate(NOW)
        self.node_name = page.eval_on_selector("#node-table tbody tr", "tr => tr.dataset.node")
        page.wait_for_timeout(self.seconds * 1000)
        found = {"overview_load": self.reported(page, 0, ready), "overview_idle": self.reported(page, ready)}
        self.close(page)
        return found

    def overview_sorted_tooltip(self) -> dict[str, Found]:
        """Table sorted by utilization (it changes every frame), a heatmap tooltip open."""
        page = self.open_overview()
        since = page.evaluate(NOW)
        page.click('#node-table th[data-key="util"]')
        heatmap = page.locator("#heatmap")
        heatmap.scroll_into_view_if_needed()
        box = heatmap.bounding_box()
        assert box is not None, "the heatmap is on the page"
        # A GPU in the upper rows, right of the row labels.
        x, y = box["x"] + 0.6 * box["width"], box["y"] + min(120, 0.6 * box["height"])
        page.mouse.move(x, y)
        page.wait_for_selector("#heat-tooltip:not([hidden])")
        # A hand on the mouse is never quite still: each small move runs the heatmap's hover and the tooltip.
        end = time.monotonic() + self.seconds
        step = 0
        while time.monotonic() < end:
            step += 1
            page.mouse.move(x + step % 2, y)
            page.wait_for_timeout(1000)
        found = {"overview_sorted_tooltip": self.reported(page, since)}
        self.close(page)
        return found

    def overview_colour_modes(self) -> dict[str, Found]:
        """Each colour mode of the heatmap once, ending on utilization, the default."""
        page = self.open_overview()
        since = page.evaluate(NOW)
        modes = page.eval_on_selector_all("#heat-metric option", "options => options.map(o => o.value)")
        for mode in modes[1:] + modes[:1]:
            page.select_option("#heat-metric", mode)
            page.wait_for_timeout(self.seconds * 1000 / len(modes))
        found = {"overview_colour_modes": self.reported(page, since)}
        self.close(page)
        return found

    def overview_problems_filter(self) -> dict[str, Found]:
        """Rows with the most faults first, then a node's name typed into the filter, a key at a time."""
        page = self.open_overview()
        since = page.evaluate(NOW)
        start = time.monotonic()
        page.select_option("#node-order", "problems")
        page.wait_for_timeout(1000)
        page.locator("#node-filter").press_sequentially(self.node_name, delay=150)
        page.wait_for_timeout(max(0.0, self.seconds - (time.monotonic() - start)) * 1000)
        found = {"overview_problems_filter": self.reported(page, since)}
        self.close(page)
        return found

    def page_loading(self, name: str, path: str) -> dict[str, Found]:
        """A page from its navigation on, loading included, for --seconds of live frames."""
        page = self.open(path)
        page.wait_for_timeout(self.seconds * 1000)
        found = {name: self.reported(page, 0)}
        self.close(page)
        return found

    def node_page(self) -> dict[str, Found]:
        """The node page of the node overview_idle read (live charts of its 8 GPUs)."""
        return self.page_loading("node_page", "/nodes/" + urllib.parse.quote(self.node_name, safe="") + "/")

    def usage_page(self) -> dict[str, Found]:
        return self.page_loading("usage_page", "/usage/")

    def health_page(self) -> dict[str, Found]:
        return self.page_loading("health_page", "/health/")

    def scenarios(self) -> list[Callable[[], dict[str, Found]]]:
        # overview_idle first: it reads the node that node_page opens.
        return [self.overview_idle, self.overview_sorted_tooltip, self.overview_colour_modes,
                self.overview_problems_filter, self.node_page, self.usage_page, self.health_page]


def summarise(found: Found) -> dict:
    durations, blocking = found["tasks"], found["blocking"]
    worst = max(durations, default=None)
    return {
        "long_tasks": len(durations),
        "max_ms": None if worst is None else round(worst),
        "p95_ms": round(float(np.percentile(durations, 95))) if durations else None,
        "tasks_ms": sorted((round(ms) for ms in durations), reverse=True),
        "blocking_frames": len(blocking),
        "blocking_ms": sorted((round(ms) for ms in blocking), reverse=True),
        "met": (worst is None or worst <= TARGET_MS) and not blocking,
    }


def machine_ms(context: "BrowserContext", cpu_slowdown: float = 1.0) -> float:
    """The median of three timings of MACHINE_SPEED in a blank page (ms), run ``cpu_slowdown`` times slower."""
    page = context.new_page()
    if cpu_slowdown != 1:
        context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": cpu_slowdown})
    timings = [page.evaluate(MACHINE_SPEED)[0] for _ in range(3)]
    page.close()
    return round(float(np.median(timings)))


def run(nodes: int, gpus_per_node: int, seconds: float, cpu_slowdown: float, say: Callable[[str], None]) -> dict:
    # Imported here: the module's help and import must not need Playwright.
    from playwright.sync_api import sync_playwright

    system = LoadSystem(nodes, gpus_per_node, interval=1.0)
    keep_logs = False
    load_before = os.getloadavg()
    found: dict[str, Found] = {}
    try:
        say(f"starting Redis, web, ingest and {system.collectors} collector(s) for {nodes} x {gpus_per_node} GPUs")
        system.start()
        session = system.login()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport=VIEWPORT)
                context.add_cookies([{"name": "sessionid", "value": session, "url": system.url}])
                context.add_init_script(OBSERVE)
                speed = machine_ms(context)
                slowed = machine_ms(context, cpu_slowdown) if cpu_slowdown != 1 else speed
                bench = Bench(context, system.url, nodes, seconds, cpu_slowdown)
                for scenario in bench.scenarios():
                    found.update(scenario())
                    say(f"{scenario.__name__} done")
                    system.check_running()
                refused = bench.refused
            finally:
                browser.close()
    except Exception as exc:
        keep_logs = True
        raise RuntimeError(f"{exc}\n(the processes' logs are kept in {system.state_dir})") from exc
    finally:
        system.stop(keep_logs=keep_logs)
    return {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "gpus": nodes * gpus_per_node, "seconds": seconds,
        "target_ms": TARGET_MS,
        "machine_ms": speed,
        "cpu_slowdown": cpu_slowdown,
        "slowed_machine_ms": slowed,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "scenarios": {name: summarise(scenario) for name, scenario in found.items()},
        "csp_violations": refused,
    }


def table(result: dict) -> str:
    lines = [
        f"{result['gpus']} GPUs ({result['nodes']} x {result['gpus_per_node']}), {result['seconds']:g} s a scenario, "
        f"load average before {result['load_average']['before'][0]}, after {result['load_average']['after'][0]}, "
        f"machine {result['machine_ms']} ms (a fixed script; lower is faster), pages run "
        f"{result['cpu_slowdown']:g} x slower ({result['slowed_machine_ms']} ms)",
        f"{'scenario':<26} {'long tasks':>10} {'max ms':>7} {'p95 ms':>7} {'blocking frames':>15} "
        f"{'most blocking ms':>16}  none > {result['target_ms']:g} ms",
    ]
    for name, s in result["scenarios"].items():
        worst = "—" if s["max_ms"] is None else s["max_ms"]
        p95 = "—" if s["p95_ms"] is None else s["p95_ms"]
        blocking = s["blocking_ms"][0] if s["blocking_ms"] else "—"
        lines.append(f"{name:<26} {s['long_tasks']:>10} {worst:>7} {p95:>7} {s['blocking_frames']:>15} {blocking:>16}  "
                     f"{'yes' if s['met'] else 'NO'}")
    if result["csp_violations"]:
        lines.append("CSP violations: " + "; ".join(result["csp_violations"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench_browser_longtasks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=positive_int, default=250)
    parser.add_argument("--gpus-per-node", type=positive_int, default=8)
    parser.add_argument("--seconds", type=positive_float, default=20.0, help="how long each scenario runs")
    parser.add_argument("--cpu-slowdown", type=positive_float, default=1.0,
                        help="run the pages this many times slower (Chromium's CPU throttling): the room left")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("-v", "--verbosity", type=int, choices=(0, 1), default=1, help="0: no progress on stderr")
    args = parser.parse_args(argv)
    # SIGTERM ends the run like Ctrl-C: through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    def say(line: str) -> None:
        if args.verbosity:
            print(line, file=sys.stderr, flush=True)

    try:
        result = run(args.nodes, args.gpus_per_node, args.seconds, args.cpu_slowdown, say)
    except RuntimeError as exc:
        print(f"bench_browser_longtasks: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench_browser_longtasks: interrupted; every process it started was stopped", file=sys.stderr)
        return 1
    print(orjson.dumps(result).decode() if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
