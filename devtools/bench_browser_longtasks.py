"""Long tasks in headless Chromium on gpulse's pages at 2,000 GPUs (issue 18).

    .venv/bin/python -m devtools.bench_browser_longtasks [--nodes 250] [--gpus-per-node 8] [--seconds 20]
        [--cpu-slowdown 1] [--demo] [--json]

It starts the real pipeline with a simulated fleet sampled at 1 Hz (the load
test's LoadSystem: Redis, web, ingest, collectors; with --demo, the whole
system as `make demo` starts it, its workers too), logs Chromium in, and runs
each scenario for --seconds on a page of its own while PerformanceObservers
record the page's long tasks (main-thread tasks over 50 ms, when the page
cannot answer a click or a key) and its blocking animation frames (frames
holding such a task, rendering counted with their longest). Chromium's
`longtask` entries miss a page's first tasks (a 300 ms script run as the page
is parsed is never reported), its `long-animation-frame` entries do not, so a
scenario meets the target only with neither: none at all.

A page that loads is counted from its first contentful paint on, as
Lighthouse's Total Blocking Time counts a load: before it there is nothing on
the screen to click, and a task running across it counts with its part after
it. What came before is reported, not counted: the paint's time, and the
frames before it. In a new tab those are mostly the browser's own start: a
fresh renderer's first layout looks up its fonts through the browser process
(fontconfig), 40-80 ms on a loaded 2-vCPU machine, for any page; the same
pages reached from the nav bar, in a tab that has shown one, had none
(docs/PERFORMANCE.md). Those milliseconds
are the machine's: machine_ms, a fixed script timed first in the same browser,
says how fast it was, so runs on two machines can be compared. --cpu-slowdown N
runs the pages N times slower (Chromium's CPU throttling, as DevTools offers):
how much room is left under the target, on a machine too fast to show it.

The observer is an init script: the browser runs it in every document before
the page's own scripts, and the page's Content-Security-Policy does not apply
to it (an inline <script> would be refused). The pages' policy stays enforced:
any violation it reports is listed in the result.

The system's memory is sampled every second while the scenarios run: the
peak of its processes' RSS summed, and of their PSS (shared pages split among
the processes that share them), the browser not included.
"""

import argparse
import os
import signal
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np
import orjson

from collectors.arguments import positive_float, positive_int
from devtools.loadtest.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from devtools.loadtest.meter import MemoryMeter
from devtools.loadtest.system import LoadSystem

if TYPE_CHECKING:  # Playwright is imported where the browser starts
    from playwright.sync_api import BrowserContext, Page

TARGET_MS = 50.0


class Found(TypedDict):
    """What counts in a scenario: its long tasks' durations, its blocking frames' blocking times (ms); for a
    page that loads, also what came before its first contentful paint (ms of the page's clock)."""

    tasks: list[float]
    blocking: list[float]
    first_paint: NotRequired[float]
    before_paint: NotRequired["Found"]


class Entry(TypedDict):
    """A long task (blocking 0) or a blocking frame, as the page's observers kept it (ms of its clock)."""

    start: float
    end: float
    blocking: float


class Entries(TypedDict):
    tasks: list[Entry]
    frames: list[Entry]
    first_paint: float | None


# Entries keep their start and end, so a window reads only its own (they arrive a little after their task).
# A frame's blockingDuration is the time its long tasks ran past 50 ms: above 0, it held one.
OBSERVE = """(() => {
  const tasks = (window.gpulseLongTasks = []);
  const frames = (window.gpulseBlockingFrames = []);
  const painted = (window.gpulsePainted = { at: null });
  const refused = (window.gpulseCspViolations = []);
  document.addEventListener("securitypolicyviolation", (e) => refused.push(e.violatedDirective + " " + e.blockedURI));
  const kept = (entry, blocking) => ({ start: entry.startTime, end: entry.startTime + entry.duration, blocking });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) tasks.push(kept(entry, 0));
  }).observe({ type: "longtask", buffered: true });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (entry.blockingDuration > 0) frames.push(kept(entry, entry.blockingDuration));
    }
  }).observe({ type: "long-animation-frame", buffered: true });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (entry.name === "first-contentful-paint") painted.at = entry.startTime;
  }).observe({ type: "paint", buffered: true });
})();"""
NOW = "() => performance.now()"
ENTRIES = """() => ({
  tasks: window.gpulseLongTasks, frames: window.gpulseBlockingFrames, first_paint: window.gpulsePainted.at,
})"""


def started_within(entries: Entries, since: float, until: float | None = None) -> Found:
    """The long tasks and blocking frames that started in [since, until)."""
    def within(entry: Entry) -> bool:
        return since <= entry["start"] and (until is None or entry["start"] < until)

    return {"tasks": [e["end"] - e["start"] for e in entries["tasks"] if within(e)],
            "blocking": [e["blocking"] for e in entries["frames"] if within(e)]}


def from_first_paint(entries: Entries, until: float | None = None) -> Found:
    """A page's load: what ran from its first contentful paint on, with an entry that ran across the paint
    cut to its part after it (Lighthouse's Total Blocking Time), until ``until``; what started before the
    paint under ``before_paint``."""
    painted = entries["first_paint"]
    if painted is None:
        raise RuntimeError("the page never painted its first content")
    tasks: list[float] = []
    blocking: list[float] = []
    for entry in entries["tasks"]:
        after = entry["end"] - max(entry["start"], painted)
        if after > TARGET_MS and (until is None or entry["start"] < until):
            tasks.append(after)
    for entry in entries["frames"]:
        after = entry["end"] - max(entry["start"], painted)
        # A blocking frame blocked for the time its task ran past 50 ms; of its part after the paint, at most
        # that part's own time past 50.
        past = min(entry["blocking"], after - TARGET_MS) if entry["start"] < painted else entry["blocking"]
        if past > 0 and (until is None or entry["start"] < until):
            blocking.append(past)
    return {"tasks": tasks, "blocking": blocking, "first_paint": painted,
            "before_paint": started_within(entries, 0, painted)}
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

    def entries(self, page: "Page") -> Entries:
        """The page's long tasks, blocking frames and first paint, as its observers kept them."""
        # A task that ended just now is reported by the observers a moment later.
        page.wait_for_timeout(200)
        return page.evaluate(ENTRIES)

    def reported(self, page: "Page", since: float) -> Found:
        """The page's long tasks and blocking frames that started since ``since`` (ms of its clock)."""
        return started_within(self.entries(page), since)

    def close(self, page: "Page") -> None:
        self.refused += page.evaluate(REFUSED)
        page.close()

    def overview_idle(self) -> dict[str, Found]:
        """The overview loading (to its third frame with every node), then left alone."""
        page = self.open_overview()
        ready = page.evaluate(NOW)
        self.node_name = page.eval_on_selector("#node-table tbody tr", "tr => tr.dataset.node")
        page.wait_for_timeout(self.seconds * 1000)
        entries = self.entries(page)
        found = {"overview_load": from_first_paint(entries, ready), "overview_idle": started_within(entries, ready)}
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
        """A page from its first paint on, loading included, for --seconds of live frames."""
        page = self.open(path)
        page.wait_for_timeout(self.seconds * 1000)
        found = {name: from_first_paint(self.entries(page))}
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
    summary: dict = {
        "long_tasks": len(durations),
        "max_ms": None if worst is None else round(worst),
        "p95_ms": round(float(np.percentile(durations, 95))) if durations else None,
        "tasks_ms": descending(durations),
        "blocking_frames": len(blocking),
        "blocking_ms": descending(blocking),
        "met": (worst is None or worst <= TARGET_MS) and not blocking,
    }
    if "before_paint" in found:
        summary["first_paint_ms"] = round(found["first_paint"])
        summary["before_paint"] = {"tasks_ms": descending(found["before_paint"]["tasks"]),
                                   "blocking_ms": descending(found["before_paint"]["blocking"])}
    return summary


def descending(milliseconds: list[float]) -> list[int]:
    return sorted((round(ms) for ms in milliseconds), reverse=True)


def machine_ms(context: "BrowserContext", cpu_slowdown: float = 1.0) -> tuple[float, float]:
    """The medians of three timings of MACHINE_SPEED (ms) in a blank page, and in one run ``cpu_slowdown`` times
    slower (the first again at 1), timed in turns: the machine's speed drifts, most as the system's processes
    finish starting, and three plain timings then three slowed ones once read 290 and 333 ms at 4 x."""
    pages = [context.new_page()]
    if cpu_slowdown != 1:
        pages.append(context.new_page())
        context.new_cdp_session(pages[1]).send("Emulation.setCPUThrottlingRate", {"rate": cpu_slowdown})
    timings: list[list[float]] = [[] for _ in pages]
    for _ in range(3):
        for page, kept in zip(pages, timings, strict=True):
            kept.append(page.evaluate(MACHINE_SPEED)[0])
    for page in pages:
        page.close()
    medians = [round(float(np.median(kept))) for kept in timings]
    return medians[0], medians[-1]


def run(nodes: int, gpus_per_node: int, seconds: float, cpu_slowdown: float, say: Callable[[str], None],
        demo: bool = False) -> dict:
    # Imported here: the module's help and import must not need Playwright.
    from playwright.sync_api import sync_playwright

    system = LoadSystem(nodes, gpus_per_node, interval=1.0, whole_demo=demo)
    keep_logs = False
    load_before = os.getloadavg()
    found: dict[str, Found] = {}
    memory: MemoryMeter | None = None
    try:
        say(f"starting {'the whole demo' if demo else 'Redis, web, ingest and collectors'} for {nodes} x "
            f"{gpus_per_node} GPUs")
        system.start()
        memory = MemoryMeter([pid for pids in system.pids().values() for pid in pids])
        memory.start()
        session = system.login()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport=VIEWPORT)
                context.add_cookies([{"name": "sessionid", "value": session, "url": system.url}])
                context.add_init_script(OBSERVE)
                speed, slowed = machine_ms(context, cpu_slowdown)
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
        if memory is not None:
            memory.stop()
        system.stop(keep_logs=keep_logs)
    assert memory is not None, "a run that got here started the meter"
    return {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "gpus": nodes * gpus_per_node, "seconds": seconds,
        "system": "demo" if demo else "load",
        "memory": memory.result(),
        "target_ms": TARGET_MS,
        "machine_ms": speed,
        "cpu_slowdown": cpu_slowdown,
        "slowed_machine_ms": slowed,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "scenarios": {name: summarise(scenario) for name, scenario in found.items()},
        "csp_violations": refused,
    }


def table(result: dict) -> str:
    met_heading = f"none > {result['target_ms']:g} ms"
    lines = [
        f"{result['gpus']} GPUs ({result['nodes']} x {result['gpus_per_node']}), {result['seconds']:g} s a scenario, "
        f"load average before {result['load_average']['before'][0]}, after {result['load_average']['after'][0]}, "
        f"machine {result['machine_ms']} ms (a fixed script; lower is faster), pages run "
        f"{result['cpu_slowdown']:g} x slower ({result['slowed_machine_ms']} ms)",
        "A page that loads counts from its first paint on; before it, not counted: the paint's time (ms) and the "
        "most blocking ms of a frame.",
        f"{'scenario':<26} {'long tasks':>10} {'max ms':>7} {'p95 ms':>7} {'blocking frames':>15} "
        f"{'most blocking ms':>16}  {met_heading}  {'first paint':>11} {'before it':>9}",
    ]
    for name, s in result["scenarios"].items():
        worst = "—" if s["max_ms"] is None else s["max_ms"]
        p95 = "—" if s["p95_ms"] is None else s["p95_ms"]
        blocking = s["blocking_ms"][0] if s["blocking_ms"] else "—"
        line = (f"{name:<26} {s['long_tasks']:>10} {worst:>7} {p95:>7} {s['blocking_frames']:>15} {blocking:>16}  "
                f"{'yes' if s['met'] else 'NO':<{len(met_heading)}}")
        if "before_paint" in s:
            before = s["before_paint"]["blocking_ms"][0] if s["before_paint"]["blocking_ms"] else "—"
            line += f"  {s['first_paint_ms']:>11} {before:>9}"
        lines.append(line.rstrip())
    memory = result["memory"]
    lines.append(f"{'the whole demo' if result['system'] == 'demo' else 'the system'}'s memory at its peak: "
                 f"{memory['peak_pss_mib']} MiB PSS ({memory['peak_rss_mib']} MiB RSS summed), "
                 f"{memory['processes']} processes, the browser not included")
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
    parser.add_argument("--demo", action="store_true",
                        help="run on the whole system as `make demo` starts it (its workers too)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("-v", "--verbosity", type=int, choices=(0, 1), default=1, help="0: no progress on stderr")
    args = parser.parse_args(argv)
    # SIGTERM ends the run like Ctrl-C: through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    def say(line: str) -> None:
        if args.verbosity:
            print(line, file=sys.stderr, flush=True)

    try:
        result = run(args.nodes, args.gpus_per_node, args.seconds, args.cpu_slowdown, say, demo=args.demo)
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
