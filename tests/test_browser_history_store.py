"""The node page's history past the database (issue 35), in Chromium: a system whose database keeps two days of
hourly rows and whose GPULSE_HISTORY_PROMQL_URL is a real VictoriaMetrics that remote write filled with the
node's hours of five days ago. The 90-day range draws the store's buckets at their times with their values
beside the database's, and says where the store's part ends; with the store down it says why and still draws
the database's part."""

import time

import pytest
import redis

from devtools.redis_server import free_port
from devtools.stack import Stack
from gpulse.keys import Keys
from tests.browser import logged_in_page
from tests.fixtures_system import ADMIN_PASSWORD, ADMIN_USER
from tests.test_history_store import HOUR, NODE, QUARTERS, at_hour, store_hours  # noqa: F401 (a fixture)
from tests.victoria_metrics import needs_victoria_metrics, victoria_metrics  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, needs_victoria_metrics]

RETAIN_HOURS_DAYS = 2
# A 90-day range holds 2,160 hours: the history merges them into 6-hour buckets (dashboard/nodes/history.py).
BUCKET = 6 * HOUR
STORE_HOURS = 3  # the hours store_hours writes, from its first
# The database's one hourly row of GPU 0, half a day ago: util and temp as (min, mean, max).
LOCAL_UTIL, LOCAL_TEMP = (1, 2, 3), (30, 31, 32)
# What a history chart draws, read from its uPlot: per series label ("GPU 0", "GPU 0 low", "GPU 0 high"),
# [time, value] of each point with a value, and where that time lies across the plot (0: its left edge, 1: right).
DRAWN = """(id) => {
  const u = document.getElementById(id).timeChart.uplot;
  if (!u) return null;
  const width = u.bbox.width / uPlot.pxRatio, drawn = {};
  u.series.forEach((s, k) => {
    if (k === 0) return;
    drawn[s.label] = u.data[0].map((t, i) => [t, u.data[k][i], u.valToPos(t, "x") / width])
      .filter(point => point[1] !== null);
  });
  return drawn;
}"""


@pytest.fixture(scope="module")
def store_system(tmp_path_factory, victoria_metrics):  # noqa: F811
    """A system of its own whose database keeps RETAIN_HOURS_DAYS of hourly rows and reads older ones from the
    store, holding NODE (known, no longer sending) with GPU 0's row of half a day ago."""
    stack = Stack(
        port=free_port(), state_dir=tmp_path_factory.mktemp("store-system"), sim_nodes=1, sim_gpus=1,
        node_workers=False,
        extra_env={"GPULSE_ADMIN_PASSWORD": ADMIN_PASSWORD, "GPULSE_HISTORY_PROMQL_URL": victoria_metrics.base,
                   "GPULSE_RETAIN_HOURS_DAYS": str(RETAIN_HOURS_DAYS)},
    )
    try:
        stack.start()
        with redis.Redis.from_url(stack.redis_url) as client:
            client.hset(Keys().known_nodes, NODE, f'{{"ts": {time.time() - 600}, "interval": 1.0}}')
        (low, mean, high), (temp_low, temp_mean, temp_high) = LOCAL_UTIL, LOCAL_TEMP
        stack.manage("shell", "-c", (
            "import datetime as dt; from dashboard.live.models import GpuRollupHour;"
            f" GpuRollupHour.objects.create(node={NODE!r}, gpu=0, samples=60,"
            f" hour=dt.datetime.fromtimestamp({at_hour(0.5)}, dt.UTC),"
            f" util_min={low}, util_mean={mean}, util_max={high}, util_sum={mean * 60}, util_count=60,"
            f" temp_min={temp_low}, temp_mean={temp_mean}, temp_max={temp_high}, temp_sum={temp_mean * 60},"
            " temp_count=60)"))
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def store_page(chromium, store_system):
    with logged_in_page(chromium, store_system.url.rstrip("/"), ADMIN_USER, ADMIN_PASSWORD) as page:
        yield page


def drawn_gpus(page, chart: str) -> dict[int, dict[int, tuple]]:
    """The chart's points once drawn: GPU -> bucket start -> (min, mean, max), each point inside the plot."""
    page.locator(f"#{chart}").scroll_into_view_if_needed()  # charts far off the screen wait (node.js inTurn)
    page.wait_for_function(f"() => ({DRAWN})('{chart}') !== null")
    drawn = page.evaluate(DRAWN, chart)
    for label, points in drawn.items():
        assert all(0 <= where <= 1 for _, _, where in points), (label, points)
    values = {label: {int(t): value for t, value, _ in points} for label, points in drawn.items()}
    gpus = {int(label.split()[1]) for label in drawn}
    return {gpu: {t: (values[f"GPU {gpu} low"][t], mean, values[f"GPU {gpu} high"][t])
                  for t, mean in values[f"GPU {gpu}"].items()} for gpu in gpus}


def bucket(ts: int) -> int:
    return ts // BUCKET * BUCKET


def store_buckets(first: int) -> dict[int, dict[str, tuple]]:
    """What the store's readings of store_hours come to in the 90-day range's buckets: per bucket start, util
    and temp as (min, mean, max) of the readings in it (each hour's, QUARTERS with its hour added to util)."""
    readings: dict[int, list[tuple[float, float]]] = {}
    for hour in range(STORE_HOURS):
        start = first + hour * HOUR
        readings.setdefault(bucket(start), []).extend((util + hour, temp) for util, temp in QUARTERS)
    found = {}
    for start, pairs in readings.items():
        utils, temps = [u for u, _ in pairs], [t for _, t in pairs]
        found[start] = {"util": (min(utils), sum(utils) / len(utils), max(utils)),
                        "temp": (min(temps), sum(temps) / len(temps), max(temps))}
    return found


def open_90_days(page, system) -> dict:
    """Open NODE's page and choose 90 days in its range picker, as a person does; return the history the page
    was answered."""
    page.goto(f"{system.url}nodes/{NODE}/")
    with page.expect_response(lambda response: f"/api/v1/nodes/{NODE}?since=90d" in response.url) as answer:
        page.click(".range-picker a[data-since='90d']")
    page.wait_for_url("**/?since=90d")
    return answer.value.json()["history"]


def test_a_range_older_than_the_database_keeps_draws_the_stores_buckets(store_system, store_page, store_hours):  # noqa: F811
    history = open_90_days(store_page, store_system)
    assert history["store"]["error"] is None, history["store"]
    util, temp = drawn_gpus(store_page, "hist-util"), drawn_gpus(store_page, "hist-temp")
    old = store_buckets(store_hours)
    local = bucket(at_hour(0.5))
    # GPU 0: the store's buckets of five days ago, then the database's of half a day ago; GPU 1, which has no
    # rows in the database, the store's alone. Each at its bucket's start, with its readings' min, mean, max.
    assert util == {0: {**{t: b["util"] for t, b in old.items()}, local: LOCAL_UTIL},
                    1: {t: b["util"] for t, b in old.items()}}
    assert temp == {0: {**{t: b["temp"] for t, b in old.items()}, local: LOCAL_TEMP},
                    1: {t: b["temp"] for t, b in old.items()}}
    # Where the store's part ends: the database's retention, two days back from the answer.
    until = history["store"]["until"]
    assert abs(until - (time.time() - RETAIN_HOURS_DAYS * 86400)) < 120
    said = store_page.text_content("#history-resolution")
    shown_until = store_page.evaluate("ts => window.GpulseFormat.dateTime(ts)", until)
    assert said == f"6-hour buckets of hourly rollups, those before {shown_until} from the long-term store", said
    assert store_page.is_hidden("#history-note")


def test_a_store_that_is_down_is_named_and_the_databases_part_still_drawn(store_system, store_page,
                                                                         victoria_metrics):  # noqa: F811
    victoria_metrics.stop()
    try:
        open_90_days(store_page, store_system)
        store_page.wait_for_selector("#history-note:not([hidden])")
        note = store_page.text_content("#history-note")
        assert note.startswith("The long-term store could not be read: unreachable ("), note
        assert note.endswith("; showing the database's rows only."), note
        util = drawn_gpus(store_page, "hist-util")
    finally:
        victoria_metrics.start()
    assert util == {0: {bucket(at_hour(0.5)): LOCAL_UTIL}}
    assert store_page.text_content("#history-resolution") == "6-hour buckets of hourly rollups"
