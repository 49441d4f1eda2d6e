"""What the overview tells a screen reader as the cluster changes: its live regions
(role="status", static/gpulse/announce.js) speak a change of state once, not every tick
of the frame age or every retry of the connection."""

import os
import signal
import time

import pytest

from tests.test_browser_live import open_overview

pytestmark = pytest.mark.browser

RULE = "announcements test rule"
# A rule firing on a node the simulated fleet does not have: the evaluator leaves its alert as it is.
CREATE_FIRING = (
    "from django.utils import timezone; from dashboard.alerts.models import Alert, Rule, fingerprint; "
    f"rule = Rule.objects.create(name={RULE!r}, metric='gpu.temp', comparison='>', threshold=85, for_seconds=0, "
    "node_glob='announce-*'); Alert.objects.create(fingerprint=fingerprint(rule.id, 'announce-01', 0), rule=rule, "
    "node='announce-01', gpu=0, status='firing', status_since=timezone.now(), value=91)"
)
DELETE_FIRING = f"from dashboard.alerts.models import Rule; Rule.objects.filter(name={RULE!r}).delete()"

# Counts each time a region's text is written: every write is read out.
COUNT_WRITES = """ids => {
  window.writes = {};
  for (const id of ids) {
    window.writes[id] = 0;
    new MutationObserver(records => { window.writes[id] += records.length; })
      .observe(document.getElementById(id), {childList: true, characterData: true, subtree: true});
  }
}"""


def says(region: str, words: str) -> str:
    return f"() => document.getElementById({region!r}).textContent === {words!r}"


def firing_words(count: int) -> str:
    return {0: "No alerts firing.", 1: "1 alert firing."}.get(count, f"{count} alerts firing.")


def test_the_overview_has_its_live_regions_and_keeps_quiet_about_the_state_it_opened_in(admin_page, running_system):
    open_overview(admin_page, running_system)
    admin_page.wait_for_function("() => document.getElementById('conn-state').textContent === 'live'")
    regions = admin_page.evaluate("""() => Array.from(document.querySelectorAll("[role=status]"), el => ({
      id: el.id, text: el.textContent, width: el.getBoundingClientRect().width}))""")
    # Drawn nowhere, and empty: what the page opened with is on screen, to be read there.
    assert regions == [{"id": id, "text": "", "width": 1} for id in ("said-connection", "said-frames", "said-firing")]


def test_a_change_in_the_alerts_firing_is_announced_once(admin_page, running_system):
    page, stack = admin_page, running_system.stack
    open_overview(page, running_system)
    page.evaluate(COUNT_WRITES, ["said-firing"])
    firing = int(page.text_content("#kpi-alerts"))
    stack.manage("shell", "-c", CREATE_FIRING)
    try:
        page.wait_for_function(says("said-firing", firing_words(firing + 1)))
        time.sleep(3)  # three frames more, each with the same count
        assert page.evaluate("() => window.writes['said-firing']") == 1
    finally:
        stack.manage("shell", "-c", DELETE_FIRING)
    page.wait_for_function(says("said-firing", firing_words(firing)))


def test_frames_that_stop_and_come_back_are_announced_once_each(admin_page, running_system):
    """The frame age on screen counts up four times a second while ingest is stalled;
    its live region says once that the data is not current, and once that it is again."""
    page = admin_page
    open_overview(page, running_system)
    page.evaluate(COUNT_WRITES, ["said-frames", "said-connection"])
    ingest = running_system.process("ingest")
    os.kill(ingest.pid, signal.SIGSTOP)
    try:
        page.wait_for_function(says("said-frames", "No live frame for over 3 s: the data shown is not current."))
        ages = {page.text_content("#frame-age")}
        for _ in range(3):
            time.sleep(1)
            ages.add(page.text_content("#frame-age"))
        assert len(ages) == 4, ages  # the frame age on screen moved on every second
        assert page.evaluate("() => window.writes") == {"said-frames": 1, "said-connection": 0}
    finally:
        os.kill(ingest.pid, signal.SIGCONT)
    page.wait_for_function(says("said-frames", "Live frames arrive again: the data shown is current."))
    assert page.evaluate("() => window.writes") == {"said-frames": 2, "said-connection": 0}


def test_a_lost_connection_is_announced_once_however_often_the_page_retries(admin_page, running_system):
    page = admin_page
    open_overview(page, running_system)
    page.wait_for_function("() => document.getElementById('conn-state').textContent === 'live'")
    page.evaluate(COUNT_WRITES, ["said-connection"])
    page.evaluate("""() => {
      window.shown = new Set();
      new MutationObserver(() => window.shown.add(document.getElementById("conn-state").textContent))
        .observe(document.getElementById("conn-state"), {childList: true});
    }""")
    with running_system.web_down():
        page.wait_for_function(says("said-connection", "Connection to the server lost: reconnecting."))
        # The state on screen: each retry's countdown, "connecting…" between them.
        page.wait_for_function("() => window.shown.size >= 4", timeout=30_000)
        assert page.evaluate("() => window.writes['said-connection']") == 1
    page.wait_for_function(says("said-connection", "Connected: the page is live."), timeout=30_000)
    assert page.evaluate("() => window.writes['said-connection']") == 2
