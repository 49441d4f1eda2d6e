"""The browser long-task benchmark (issue 18), run small so it cannot rot: the real command, its real JSON."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from devtools.bench_browser_longtasks import FOUND, OBSERVE
from tests.browser import chromium  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"overview_load", "overview_idle", "overview_sorted_tooltip", "overview_colour_modes",
             "overview_problems_filter", "node_page", "usage_page", "health_page"}

pytestmark = pytest.mark.browser


@pytest.mark.timeout(150)
def test_the_long_task_benchmark_runs_every_scenario_and_prints_json():
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_browser_longtasks", "--nodes", "2", "--seconds", "2",
         "--cpu-slowdown", "4", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=140,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)

    assert result["gpus"] == 16 and result["target_ms"] == 50
    assert result["machine_ms"] > 0  # the machine's speed, which the run's milliseconds depend on
    # The pages ran slower: the same script took longer in a throttled page (2-3.4 times at 3 x, here: the
    # machine's own speed drifts between the two timings, so not the whole 4 x is asked).
    assert result["cpu_slowdown"] == 4 and result["slowed_machine_ms"] > 1.5 * result["machine_ms"]
    assert result["scenarios"].keys() == SCENARIOS
    for figures in result["scenarios"].values():
        assert figures["long_tasks"] == len(figures["tasks_ms"])
        assert figures["blocking_frames"] == len(figures["blocking_ms"])
        assert figures["met"] == (all(ms <= 50 for ms in figures["tasks_ms"]) and not figures["blocking_ms"])
    # The observer ran on every page (the benchmark fails otherwise), under the pages' unchanged policy.
    assert result["csp_violations"] == []


# A page that, 300 ms after it loads, puts in a table of 30,000 cells written out in its script: one
# frame of some 100-400 ms of parsing and layout, which Chromium reports as a long animation frame only.
ROWS = "<tr>" + "<td>cell</td>" * 10 + "</tr>"
BUSY_AFTER_LOAD = f"""<!doctype html><title>busy</title><div id="late"></div><script>
setTimeout(() => {{ document.getElementById("late").innerHTML = "<table>{ROWS * 3000}</table>"; }}, 300);
</script>""".encode()


def test_the_observers_catch_a_long_task_that_lays_out_a_big_table(chromium):  # noqa: F811 (the fixture)
    """Chromium's longtask entries miss such a task in a page nothing polls (the benchmark once called pages
    clean that had them); the blocking animation frames catch it."""
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
        found = page.evaluate(FOUND, [0, None])
    finally:
        context.close()
    assert found["blocking"], found
