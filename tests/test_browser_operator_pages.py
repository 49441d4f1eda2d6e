"""In a browser, on the running system: what an operator meets on the simulator, alerts,
webhook and benchmark-list pages (issue 18's misleading items)."""

import re
import time

import pytest

pytestmark = pytest.mark.browser


def test_the_simulator_refuses_a_node_the_cluster_never_saw(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/alerts/simulator/")
    # The help text is text: no <code> element swallows the rest of the page.
    assert "xid:<code>" in page.locator("#fault-form").inner_text()
    assert page.locator("#fault-form code").count() == 0
    page.fill("#id_node", "sim-99")
    page.fill("#id_gpu", "0")
    page.fill("#id_fault", "hot")
    with page.expect_navigation():
        page.click("#fault-form button[type=submit]")
    assert "the cluster has never seen a node named 'sim-99'" in page.locator("#fault-form").inner_text()
    assert "sim-99" not in page.locator("#faults").inner_text()
    assert "hot injected" not in page.locator("main").inner_text()


def test_the_webhook_form_refuses_a_private_target_saying_how_to_allow_it(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/alerts/webhooks/")
    page.fill("#id_name", "loopback")
    page.fill("#id_url", "http://127.0.0.1:9/hook")
    with page.expect_navigation():
        page.click("#webhook-form button[type=submit]")
    form = page.locator("#webhook-form").inner_text()
    assert "refused: 127.0.0.1 is a loopback address" in form
    assert "GPULSE_WEBHOOK_ALLOW_PRIVATE=true" in form and "GPULSE_WEBHOOK_ALLOWED_NETWORKS" in form
    assert "loopback" not in page.locator("#endpoints").inner_text()


def test_the_alerts_page_shows_that_the_only_delivery_failed(admin_page, running_system):
    # A real alert on a simulated node, delivered by the webhook worker to an endpoint that
    # delivery refuses (written past the form, as one saved before the form checked it).
    running_system.stack.manage(
        "shell", "-c",
        "from dashboard.alerts.models import Rule, WebhookEndpoint as W; "
        "W.objects.create(name='refused-hook', url='http://127.0.0.1:9/hook'); "
        "Rule.objects.create(name='browser sees delivery', metric='gpu.temp', comparison='>', threshold=-1000, "
        "node_glob='sim-02', gpu_index=0)",
    )
    page = admin_page
    row = page.locator("details.alert-group", has_text="browser sees delivery").locator("tbody tr")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            page.goto(f"{running_system.base_url}/alerts/")
            if row.count() and "failed" in row.text_content():
                break
            time.sleep(1)
        text = row.text_content()
    finally:
        running_system.stack.manage(
            "shell", "-c",
            "from dashboard.alerts.models import Rule, WebhookEndpoint as W; "
            "Rule.objects.filter(name='browser sees delivery').delete(); "
            "W.objects.filter(name='refused-hook').delete()",
        )
    assert "refused-hook: failed" in text, text
    assert not re.search(r"\byes\b", text)


BROAD = "browser broad rule"
# One broad rule firing on many GPUs of nodes the simulated fleet does not have, so the
# evaluator leaves them as they are; the page once showed such a rule as a 44,500-px table.
CREATE_BROAD = (
    "from datetime import timedelta; from django.utils import timezone; "
    "from dashboard.alerts.models import Alert, Rule, fingerprint; now = timezone.now(); "
    f"rule = Rule.objects.create(name={BROAD!r}, metric='gpu.temp', comparison='>', threshold=85, for_seconds=300, "
    "node_glob='bulk-*'); "
    "Alert.objects.bulk_create(Alert(fingerprint=fingerprint(rule.id, f'bulk-{n:04d}', 0), rule=rule, "
    "node=f'bulk-{n:04d}', gpu=0, status='firing', status_since=now - timedelta(seconds=n), value=91) "
    "for n in range(1145))"
)


def test_the_alerts_page_stays_short_and_a_refresh_keeps_what_the_person_was_doing(admin_page, running_system):
    stack, page = running_system.stack, admin_page
    height = "() => document.documentElement.scrollHeight"
    page.clock.install()  # the 15 s refresh, on the test's time
    page.goto(f"{running_system.base_url}/alerts/")
    before = page.evaluate(height)
    stack.manage("shell", "-c", CREATE_BROAD)
    try:
        page.goto(f"{running_system.base_url}/alerts/")
        # One row more (other tests' alerts may come and go meanwhile), where a table was 44,500 px.
        assert page.evaluate(height) - before < 1000
        group = page.locator("details.alert-group", has_text=BROAD)
        assert "1145 firing" in group.locator("summary").inner_text()
        assert "GPU temperature above 85 °C for 5 min" in group.locator("summary").inner_text()
        group.locator("summary").click()
        assert group.locator("tbody tr").count() == 50 and group.locator("tbody tr").first.is_visible()
        assert page.evaluate(height) - before < 3000  # 50 rows, not 1,145
        page.fill("#id_comment", "rack 4 is being re-cabled")
        page.evaluate("() => { window.scrollTo(0, 300); window.notReloaded = true; }")
        stack.manage("shell", "-c", "from django.utils import timezone; from dashboard.alerts.models import Alert, "
                     f"Rule, fingerprint; rule = Rule.objects.get(name={BROAD!r}); Alert.objects.create("
                     "fingerprint=fingerprint(rule.id, 'bulk-9999', 0), rule=rule, node='bulk-9999', gpu=0, "
                     "status='pending', status_since=timezone.now())")

        page.clock.run_for(15_000)
        page.wait_for_function(f"() => Array.from(document.querySelectorAll('details.alert-group summary'))"
                               f".some(s => s.textContent.includes({BROAD!r}) && s.textContent.includes('1 pending'))")
        assert page.evaluate("() => window.notReloaded") is True
        assert group.get_attribute("open") is not None and group.locator("tbody tr").first.is_visible()
        assert page.input_value("#id_comment") == "rack 4 is being re-cabled"
        assert page.evaluate("() => window.scrollY") == 300
    finally:
        stack.manage("shell", "-c",
                     f"from dashboard.alerts.models import Rule; Rule.objects.filter(name={BROAD!r}).delete()")


def test_the_job_list_fills_in_a_finished_job_and_shows_a_new_one_without_a_reload(admin_page, running_system):
    stack = running_system.stack
    create = ("from dashboard.benchmarks.models import BenchmarkJob as J; print(J.objects.create("
              "nodes=['sim-01'], ranks_per_node=1, min_bytes=1024, max_bytes=2048, status='running').pk)")
    job = int(stack.manage("shell", "-c", create).splitlines()[-1])
    newer = None
    page = admin_page
    try:
        page.goto(f"{running_system.base_url}/benchmarks/")
        row = page.locator(f'tr[data-job="{job}"]')
        assert row.locator("input[type=checkbox]").is_disabled()
        page.evaluate("() => { window.notReloaded = true; }")

        result = ('{"rows": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "time_us": 9.0, '
                  '"algbw": 1.5, "busbw": 1.5, "wrong": 0, "inplace": false}], "avg_busbw": 1.5}')
        stack.manage("shell", "-c", "import json; from datetime import timedelta; from django.utils import timezone; "
                     "from dashboard.benchmarks.models import BenchmarkJob as J; now = timezone.now(); "
                     f"J.objects.filter(pk={job}).update(status='succeeded', started=now - timedelta(seconds=12.5), "
                     f"finished=now, avg_busbw=1.5, result=json.loads({result!r}))")
        newer = int(stack.manage("shell", "-c", create).splitlines()[-1])

        page.wait_for_function(f"() => document.querySelector('tr[data-job=\"{newer}\"]') !== null")
        page.wait_for_function(f"() => !document.querySelector('tr[data-job=\"{job}\"] input[type=checkbox]').disabled")
        assert page.evaluate("() => window.notReloaded") is True
        assert row.locator(".status").text_content() == "succeeded"
        assert row.locator(".busbw").inner_text() == "1.50"
        assert row.locator(".duration").inner_text() == "12.5 s"
        first = page.locator("#jobs tbody tr").first
        assert first.get_attribute("data-job") == str(newer)
        assert first.locator("a").get_attribute("href") == f"/benchmarks/{newer}/"
        assert "sim-01" in first.inner_text() and first.locator(".status").text_content() == "running"
    finally:
        # Jobs nobody runs: end them, or they would hold sim-01 for the next test's launch.
        ended = [j for j in (job, newer) if j is not None]
        stack.manage("shell", "-c", "from dashboard.benchmarks.models import BenchmarkJob as J; "
                     f"J.objects.filter(pk__in={ended}, status='running').update(status='cancelled')")
