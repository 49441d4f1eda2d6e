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
# Records each call a page makes that loads ICU's data when it is the page's first: the Intl objects made and
# the locale methods of Date, Number and String (15-74 ms in Chromium, a long task now and then; issue 18).
COUNT_ICU = """(() => {
  const calls = (window.gpulseIcuCalls = []);
  for (const name of ["Collator", "DateTimeFormat", "DisplayNames", "ListFormat", "NumberFormat", "PluralRules",
                      "RelativeTimeFormat", "Segmenter"]) {
    const Made = Intl[name];
    Intl[name] = function (...args) { calls.push("Intl." + name); return new Made(...args); };
  }
  for (const [type, methods] of [[Date, ["toLocaleString", "toLocaleDateString", "toLocaleTimeString"]],
                                 [Number, ["toLocaleString"]], [String, ["localeCompare"]]]) {
    for (const method of methods) {
      const called = type.prototype[method];
      type.prototype[method] = function (...args) {
        calls.push(type.name + "." + method);
        return called.apply(this, args);
      };
    }
  }
})();"""
ICU_CALLS = "() => window.gpulseIcuCalls"
AXIS_NUMBERS = """() => {
  const values = [0, 5, 0.25, 0.125, 12.5, 99.9999, 1000, 1500, 25000, 1234567.891, -0.5, -1500];
  return [values.map(window.GpulseFormat.axisNumber), values.map(v => new Intl.NumberFormat("en-US").format(v))];
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
    name = next(n for n in ZONE_NAMES[zone] if ("Daylight" in n) == bool(now.dst()))
    return f"{name} ({utc_offset(now)})"


def utc_offset(moment: datetime) -> str:
    """A zone's offset at ``moment`` as the pages write it: "UTC−08:00"."""
    offset = moment.utcoffset()
    assert offset is not None
    minutes = int(offset.total_seconds() // 60)
    return f"UTC{'−' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


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
                context.add_init_script(COUNT_ICU)  # the banner's time written without ICU, as the axis' is
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
                # The whole time, with its zone's offset as the page's zone name says it.
                assert f"{local:%Y-%m-%d %H:%M:%S} {utc_offset(local)}" in banner, (zone, banner)
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
                assert page.evaluate(ICU_CALLS) == [], zone
            finally:
                context.close()
    finally:
        client.hdel(keys.simulator_faults, "sim-04")
    wait_until(lambda: client.exists(keys.node("sim-04")), 15, "sim-04 to report again")


def test_the_live_pages_load_without_icu(chromium, running_system):
    """The first locale format a page made loaded ICU's data, 15-74 ms in the task that made it: /health/'s
    zone name, uPlot's number and zone formats as it was evaluated, /usage/'s y axis, the node page's times in
    the locale's format; now and then a long task as a page loaded (issue 18). The zone's name, the times and the
    charts' numbers are written without them, and uPlot makes its formats when first asked for one."""
    zone = "Asia/Tokyo"
    context = chromium.new_context(viewport=VIEWPORT, timezone_id=zone)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/health/")
        context.add_init_script(COUNT_ICU)
        for path, drawn in (("/health/", "() => document.getElementById('time-zone').textContent !== ''"),
                            ("/usage/", "() => { const c = document.getElementById('usage-chart').timeChart; "
                                        "return c.uplot !== null || !c.empty.hidden; }"),
                            ("/nodes/sim-01/", f"() => ({LAST_POINT})() !== null"),
                            ("/", "() => window.gpulse && window.gpulse.frames >= 2")):
            page.goto(running_system.base_url + path)
            page.wait_for_function(drawn)
            if path != "/":
                assert page.text_content("#time-zone").endswith("times in " + zone_said(zone)), path
            assert page.evaluate(ICU_CALLS) == [], path
        # The charts' y axes read as uPlot's own labels did, in English (counted once the page is done).
        written, intl = page.evaluate(AXIS_NUMBERS)
        assert written == intl
    finally:
        context.close()


PARIS = "Europe/Paris"
# A time as any page writes it, with whatever label follows it: none, "UTC", or an offset.
WRITTEN_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})?(?: (UTC(?:[+−-]\d{2}:\d{2})?))?")
ONE_CLOCK_RULE = "one clock"
ONE_CLOCK_SETUP = (
    "from datetime import timedelta; from django.utils import timezone; "
    "from dashboard.alerts.models import Rule, Silence, WebhookEndpoint as W; "
    "W.objects.create(name='one-clock-hook', url='http://127.0.0.1:9/hook'); "
    f"Rule.objects.create(name={ONE_CLOCK_RULE!r}, metric='gpu.temp', comparison='>', threshold=-1000, "
    "node_glob='sim-03', gpu_index=0); "
    f"Silence.objects.create(node_glob='sim-99', until=timezone.now() + timedelta(hours=2), comment={ONE_CLOCK_RULE!r})"
)
ONE_CLOCK_RESOLVE = ("from dashboard.alerts.models import Rule; "
                     f"Rule.objects.filter(name={ONE_CLOCK_RULE!r}).update(threshold=1000)")
ONE_CLOCK_TEARDOWN = (
    "from dashboard.alerts.models import Rule, Silence, WebhookEndpoint as W; "
    f"Rule.objects.filter(name={ONE_CLOCK_RULE!r}).delete(); "
    f"Silence.objects.filter(comment={ONE_CLOCK_RULE!r}).delete(); "
    "W.objects.filter(name='one-clock-hook').delete()"
)
# The node page's Alerts section has this rule's alert: its <time>'s datetime, text and title.
ALERT_TIME = f"""() => {{
  const row = Array.from(document.querySelectorAll("#node-alert-table tbody tr"))
    .find(tr => tr.cells[0].textContent === {ONE_CLOCK_RULE!r});
  const time = row && row.querySelector("time");
  return time ? {{datetime: time.getAttribute("datetime"), text: time.textContent, title: time.title}} : null;
}}"""
SERVER_TIMES = """() => Array.from(document.querySelectorAll("time.local-time"),
  time => ({datetime: time.getAttribute("datetime"), text: time.textContent, title: time.title}))"""


def labels_of_times(text: str) -> list[str | None]:
    """The label after each time written in ``text``: None where there is none."""
    return [match[1] for match in WRITTEN_TIME.finditer(text)]


def assert_in_browser_zone(shown: dict, zone: str) -> None:
    """A server time (the local_time tag) reads as the browser's zone says it, with UTC on hover."""
    moment = datetime.fromisoformat(shown["datetime"].replace("Z", "+00:00"))
    local = moment.astimezone(ZoneInfo(zone))
    digits = 19 if len(shown["text"]) > len("YYYY-MM-DD HH:MM UTC+01:00") else 16  # to the second or the minute
    assert shown["text"] == f"{local:%Y-%m-%d %H:%M:%S}"[:digits] + " " + utc_offset(local), shown
    assert shown["title"] == f"{moment:%Y-%m-%d %H:%M:%S} UTC", shown


def test_every_page_shows_its_times_in_the_browsers_zone(chromium, running_system):
    """Issue 32: the node page's Alerts section said "Since 2026-11-27 20:50:39" (UTC, unlabelled) beside a Health
    panel in the browser's zone, and /alerts/ and the delivery log were UTC. Every time on every page now reads in
    the browser's zone, labelled, with UTC on hover: the server's too, also after a live part is fetched again."""
    stack = running_system.stack
    context = chromium.new_context(viewport=VIEWPORT, timezone_id=PARIS)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/nodes/sim-03/")
        stack.manage("shell", "-c", ONE_CLOCK_SETUP)
        # The alert fires after the page loaded: its row comes in the section the page fetches again.
        page.wait_for_function(f"() => ({ALERT_TIME})() !== null", timeout=30_000)
        alert_time = page.evaluate(ALERT_TIME)
        assert alert_time["datetime"].endswith("Z"), alert_time
        assert_in_browser_zone(alert_time, PARIS)
        page.wait_for_function("() => document.getElementById('health-since').textContent !== ''")
        node_text = page.inner_text("main")
        assert "UTC+01:00" in page.text_content("#health-since")
        assert labels_of_times(node_text) and set(labels_of_times(node_text)) == {"UTC+01:00"}, node_text

        stack.manage("shell", "-c", ONE_CLOCK_RESOLVE)
        for path, ready in (("/alerts/", "#resolved time"), ("/alerts/webhooks/", "#delivery-log time"),
                            ("/usage/", "#range-shown time")):
            deadline = time.monotonic() + 60
            while True:
                page.goto(running_system.base_url + path)
                if page.locator(ready).count() or time.monotonic() > deadline:
                    break
                time.sleep(1)
            times = page.evaluate(SERVER_TIMES)
            assert page.locator(ready).count(), (path, times)
            for server_time in times:
                assert_in_browser_zone(server_time, PARIS)
            labels = labels_of_times(page.inner_text("main"))
            assert labels and set(labels) == {"UTC+01:00"}, (path, page.inner_text("main"))
    finally:
        context.close()
        stack.manage("shell", "-c", ONE_CLOCK_TEARDOWN)
