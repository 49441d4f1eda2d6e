"""The browser long-task benchmark (issue 18), run small so it cannot rot: the real command, its real JSON."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from devtools.bench_browser_longtasks import ENTRIES, OBSERVE, from_first_paint, started_within
from tests.browser import chromium  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"overview_load", "overview_idle", "overview_sorted_tooltip", "overview_colour_modes",
             "overview_problems_filter", "node_page", "usage_page", "health_page"}

LOADS = {"overview_load", "node_page", "usage_page", "health_page"}


@pytest.mark.browser
@pytest.mark.timeout(150)
def test_the_long_task_benchmark_runs_every_scenario_on_the_whole_demo_and_prints_json():
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_browser_longtasks", "--nodes", "2", "--seconds", "2",
         "--cpu-slowdown", "4", "--demo", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=140,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)

    assert result["gpus"] == 16 and result["target_ms"] == 50
    # The demo's memory, every process of it: web, ingest, the control, webhook and node workers, the
    # collector and Redis. Shared pages counted once in PSS, in each process in RSS.
    assert result["system"] == "demo"
    memory = result["memory"]
    assert memory["processes"] >= 7, memory
    assert 0 < memory["peak_pss_mib"] <= memory["peak_rss_mib"], memory
    assert result["machine_ms"] > 0  # the machine's speed, which the run's milliseconds depend on
    # The throttled page's timing of the same script is reported. How much slower it ran is a timing (2-3.4
    # times at 3 x; 1.17 x once in a whole-suite run, the machine's own speed drifting between the two), which
    # the benchmark's figures show, not a test.
    assert result["cpu_slowdown"] == 4 and result["slowed_machine_ms"] > 0
    assert result["scenarios"].keys() == SCENARIOS
    for figures in result["scenarios"].values():
        assert figures["long_tasks"] == len(figures["tasks_ms"])
        assert figures["blocking_frames"] == len(figures["blocking_ms"])
        assert figures["met"] == (all(ms <= 50 for ms in figures["tasks_ms"]) and not figures["blocking_ms"])
    # A page that loads is counted from its first paint, which every page made; what came before is kept apart.
    for name in LOADS:
        assert result["scenarios"][name]["first_paint_ms"] > 0
        assert result["scenarios"][name]["before_paint"].keys() == {"tasks_ms", "blocking_ms"}
    assert not any("before_paint" in result["scenarios"][name] for name in SCENARIOS - LOADS)
    # The observer ran on every page (the benchmark fails otherwise), under the pages' unchanged policy.
    assert result["csp_violations"] == []


# A page that, 300 ms after it loads, puts in a table of 30,000 cells written out in its script: one
# frame of some 100-400 ms of parsing and layout, which Chromium reports as a long animation frame only.
ROWS = "<tr>" + "<td>cell</td>" * 10 + "</tr>"
BUSY_AFTER_LOAD = f"""<!doctype html><title>busy</title><h1>busy</h1><div id="late"></div><script>
setTimeout(() => {{ document.getElementById("late").innerHTML = "<table>{ROWS * 3000}</table>"; }}, 300);
</script>""".encode()


@pytest.mark.browser
def test_the_observers_catch_a_long_task_that_lays_out_a_big_table(chromium):  # noqa: F811 (the fixture)
    """Chromium's longtask entries miss such a task in a page nothing polls (the benchmark once called pages
    clean that had them); the blocking animation frames catch it. Which of the two reports it is not
    fixed (Chromium 156 here: the frame; the same version on CI once: the task only), and the benchmark
    counts both, so either one fails the page."""
    context = chromium.new_context()
    try:
        context.add_init_script(OBSERVE)
        context.route("http://busy.test/", lambda route: route.fulfill(body=BUSY_AFTER_LOAD, content_type="text/html"))
        page = context.new_page()
        page.goto("http://busy.test/")
        # Waited for without polling the page, as a scenario waits: Playwright's polling in animation
        # frames is what made Chromium report the task as a long task too.
        page.wait_for_timeout(1000)
        assert page.evaluate("() => document.querySelectorAll('#late td').length") == 30000
        entries = page.evaluate(ENTRIES)
    finally:
        context.close()
    caught = started_within(entries, 0)
    assert [ms for ms in caught["tasks"] if ms > 50] or caught["blocking"], entries
    # The table came 300 ms after the page had painted: it counts in the page's load.
    assert entries["first_paint"] is not None, entries
    load = from_first_paint(entries)
    assert load["tasks"] or load["blocking"], entries


def task(start: float, end: float) -> dict:
    return {"start": start, "end": end, "blocking": 0}


def frame(start: float, end: float, blocking: float) -> dict:
    return {"start": start, "end": end, "blocking": blocking}


def test_a_load_counts_from_its_first_paint_and_keeps_what_came_before_apart():
    entries = {
        "first_paint": 200.0,
        "tasks": [task(10, 90), task(500, 560)],
        "frames": [frame(40, 130, 30), frame(600, 700, 40)],
    }
    found = from_first_paint(entries)
    assert found["tasks"] == [60] and found["blocking"] == [40]
    assert found["first_paint"] == 200
    assert found["before_paint"] == {"tasks": [80], "blocking": [30]}


def test_a_task_running_across_the_first_paint_counts_with_its_part_after_it():
    """As Lighthouse's Total Blocking Time clips a task at first contentful paint: a paint cannot hide a
    task that goes on blocking the page after it."""
    across = {"first_paint": 100.0, "tasks": [task(90, 250)], "frames": [frame(80, 250, 120)]}
    found = from_first_paint(across)
    # 150 ms after the paint: a long task of 150 ms, a frame blocking for at most 150 - 50 of them.
    assert found["tasks"] == [150] and found["blocking"] == [100]
    assert found["before_paint"] == {"tasks": [160], "blocking": [120]}

    # Its part after the paint is under 50 ms: nothing blocked the painted page.
    short = {"first_paint": 100.0, "tasks": [task(40, 140)], "frames": [frame(40, 140, 50)]}
    assert from_first_paint(short)["tasks"] == [] and from_first_paint(short)["blocking"] == []

    # A frame that blocked less than its part after the paint: its own blocking time, no more.
    small = {"first_paint": 100.0, "tasks": [], "frames": [frame(90, 250, 10)]}
    assert from_first_paint(small)["blocking"] == [10]


def test_a_load_ends_where_the_next_window_starts():
    entries = {"first_paint": 100.0, "tasks": [task(300, 360), task(900, 980)],
               "frames": [frame(300, 360, 10), frame(900, 980, 30)]}
    load = from_first_paint(entries, until=800)
    idle = started_within(entries, 800)
    assert (load["tasks"], load["blocking"]) == ([60], [10])
    assert idle == {"tasks": [80], "blocking": [30]}


def test_a_page_that_never_painted_fails_the_benchmark_not_passes_it():
    with pytest.raises(RuntimeError, match="never painted"):
        from_first_paint({"first_paint": None, "tasks": [task(10, 400)], "frames": []})
