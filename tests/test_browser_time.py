"""The node page reads local time in any zone: its chart axes and its banner agree.

The suite runs in UTC, where a time shifted twice (or not at all) looks right;
browsers in Los Angeles and Tokyo see the difference.
"""

import re
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import orjson
import pytest

from devtools.loadtest.browser import VIEWPORT
from gpulse.keys import Keys
from tests.browser import log_in

pytestmark = pytest.mark.browser

ZONES = ("America/Los_Angeles", "Asia/Tokyo")
# The names Chromium gives those zones in the text of a Date, in English.
ZONE_NAMES = {"America/Los_Angeles": ("Pacific Standard Time", "Pacific Daylight Time"),
              "Asia/Tokyo": ("Japan Standard Time",)}
# The newest point of the live utilization chart (time-chart.js on uPlot): its unix time, its time as the chart's
# tooltip shows it with the pointer there, the end of the time axis (unix) and the axis' tick labels (uPlot keeps
# each axis' drawn labels in _values).
LAST_POINT = """() => {
  const u = document.getElementById("live-util").timeChart.uplot;
  if (!u) return null;
  const xs = u.data[0].filter((x, i) => u.data[1][i] !== null);
  if (!xs.length) return null;
  const last = Math.max(...xs);
  u.setCursor({left: u.valToPos(last, "x"), top: 10});
  return {x: last, point: document.querySelector("#live-util .chart-tooltip-time").textContent,
          end: u.scales.x.max, ticks: u.axes[0]._values};
}"""
CLOCK = re.compile(r"(\d{1,2}):(\d{2}):(\d{2})\s*([AP]M)?")


def banner_clock(text: str) -> tuple[int, int, int]:
    """The hour, minute and second of the first time in ``text`` (12- or 24-hour)."""
    match = CLOCK.search(text)
    assert match, text
    hour, minute, second, half = int(match[1]), int(match[2]), int(match[3]), match[4]
    if half:
        hour = hour % 12 + (12 if half == "PM" else 0)
    return hour, minute, second


def zone_said(zone: str) -> str:
    """What a page says of the browser's zone now: "Pacific Standard Time (UTC−08:00)"."""
    now = datetime.now(ZoneInfo(zone))
    offset, summer = now.utcoffset(), now.dst()
    assert offset is not None
    minutes = int(offset.total_seconds() // 60)
    name = next(n for n in ZONE_NAMES[zone] if ("Daylight" in n) == bool(summer))
    return f"{name} (UTC{'−' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d})"


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_browser_in_any_zone_reads_the_same_local_time_on_axis_and_banner(chromium, running_system):
    client, keys = running_system.redis(), Keys()
    try:
        client.hset(keys.simulator_faults, "sim-04", "dead")
        wait_until(lambda: not client.exists(keys.node("sim-04")), 15, "sim-04's latest sample to expire")
        last_ts = orjson.loads(client.hget(keys.known_nodes, "sim-04"))["ts"]
        for zone in ZONES:
            local = datetime.fromtimestamp(last_ts, ZoneInfo(zone))
            context = chromium.new_context(viewport=VIEWPORT, timezone_id=zone)
            try:
                page = context.new_page()
                page.set_default_timeout(15_000)
                log_in(page, running_system.base_url, running_system.username, running_system.password,
                       "/nodes/sim-04/")
                page.wait_for_function(
                    "() => document.getElementById('node-banner').textContent.includes('no data since')"
                )
                page.wait_for_function(f"() => ({LAST_POINT})() !== null")
                banner = page.text_content("#node-banner")
                axis = page.evaluate(LAST_POINT)

                assert banner_clock(banner) == (local.hour, local.minute, local.second), (zone, banner)
                assert abs(axis["x"] - last_ts) < 0.01, (zone, axis)  # placed at its time, unshifted
                assert axis["point"][11:19] == local.strftime("%H:%M:%S"), (zone, axis)
                assert axis["point"][:10] == local.strftime("%Y-%m-%d"), (zone, axis)
                # The axis ends now, and its labels read local hours.
                now = datetime.now(ZoneInfo(zone))
                assert abs(axis["end"] - now.timestamp()) < 60
                hours = {int(tick[:2]) for tick in axis["ticks"] if re.match(r"\d{2}:\d{2}", tick)}
                assert hours and hours <= {now.hour, (now.hour - 1) % 24}, (zone, axis["ticks"])
                assert page.text_content("#time-zone") == "times in " + zone_said(zone)
                assert page.get_attribute("#node-banner", "title").endswith(" UTC")
            finally:
                context.close()
    finally:
        client.hdel(keys.simulator_faults, "sim-04")
    wait_until(lambda: client.exists(keys.node("sim-04")), 15, "sim-04 to report again")


# Counts the Intl.DateTimeFormat objects the page makes: the first one loads ICU's data (15-60 ms).
COUNT_DATE_FORMATS = """(() => {
  const Made = Intl.DateTimeFormat;
  window.gpulseDateFormatsMade = 0;
  Intl.DateTimeFormat = function (...args) { window.gpulseDateFormatsMade += 1; return new Made(...args); };
})();"""


def test_the_health_page_names_the_zone_without_loading_icu(chromium, running_system):
    """Its zone's name took an Intl.DateTimeFormat, ICU's 15-60 ms in the task evaluating the page's
    script: now and then a long task as /health/ loaded (issue 18). /usage/ says the zone the same way
    (its charts' uPlot makes a DateTimeFormat of its own as it is evaluated)."""
    zone = "Asia/Tokyo"
    context = chromium.new_context(viewport=VIEWPORT, timezone_id=zone)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/health/")
        context.add_init_script(COUNT_DATE_FORMATS)
        for path in ("/health/", "/usage/"):
            page.goto(running_system.base_url + path)
            page.wait_for_function("() => document.getElementById('time-zone').textContent !== ''")
            assert page.text_content("#time-zone").endswith("times in " + zone_said(zone)), path
            if path == "/health/":
                assert page.evaluate("() => window.gpulseDateFormatsMade") == 0
    finally:
        context.close()
