"""The browser long-task benchmark (issue 18), run small so it cannot rot: the real command, its real JSON."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"overview_load", "overview_idle", "overview_sorted_tooltip", "overview_colour_modes",
             "overview_problems_filter", "node_page", "usage_page", "health_page"}

pytestmark = pytest.mark.browser


@pytest.mark.timeout(150)
def test_the_long_task_benchmark_runs_every_scenario_and_prints_json():
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_browser_longtasks", "--nodes", "2", "--seconds", "2",
         "--cpu-slowdown", "2", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=140,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)

    assert result["gpus"] == 16 and result["target_ms"] == 50
    assert result["machine_ms"] > 0  # the machine's speed, which the run's milliseconds depend on
    # The pages ran slower: the same script took about twice as long in a throttled page.
    assert result["cpu_slowdown"] == 2 and result["slowed_machine_ms"] > 1.4 * result["machine_ms"]
    assert result["scenarios"].keys() == SCENARIOS
    for figures in result["scenarios"].values():
        assert figures["long_tasks"] == len(figures["tasks_ms"])
        assert figures["met"] == all(ms <= 50 for ms in figures["tasks_ms"])
    # The observer ran on every page (the benchmark fails otherwise), under the pages' unchanged policy.
    assert result["csp_violations"] == []
