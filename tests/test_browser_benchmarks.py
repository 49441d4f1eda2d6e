"""In a browser: launch a 2-node all-reduce on the running system, watch its rows arrive,
see the chart; a user without the permission gets 403; a POST without CSRF is refused."""

import re

import pytest

from gpulse import job_events
from gpulse.keys import Keys
from tests.browser import JOB_ENDED, log_in

pytestmark = pytest.mark.browser


# A time as the pages show it, in the browser's zone with its offset (local-time.js, format.js).
LOCAL_TIME = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+−]\d\d:\d\d$"


def test_an_operator_launches_a_two_node_job_and_watches_it_run(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/benchmarks/")
    boxes = page.locator("#node-picker input[name=nodes]:enabled")
    nodes = [boxes.nth(i).get_attribute("value") for i in range(boxes.count())][:2]
    assert len(nodes) == 2, "the launch form lists the live nodes"
    # dana's notebook holds a GPU of the simulated fleet's first node for good (collectors/simulated.py).
    assert nodes[0] == "sim-01"
    choice = page.locator("#node-picker [data-node='sim-01']")
    assert re.fullmatch(r"⚠ held by Slurm job \d+ \(user \S+\) on \d of 8 GPUs( and \d more)?",
                        choice.locator(".node-holder").inner_text())
    assert re.search(r"Slurm job \d+ \(user dana\) on 1 of 8 GPUs", choice.get_attribute("title"))
    for node in nodes:
        page.check(f"#node-picker input[value='{node}']")
    assert page.locator("#rank-order li").all_text_contents() == nodes
    page.fill("#id_ranks_per_node", "1")
    page.select_option("#id_backend", "gloo")
    page.fill("#id_min_bytes", "1K")
    page.fill("#id_max_bytes", "256K")
    page.fill("#id_iters", "5")
    page.fill("#id_warmup_iters", "1")
    # Not without a word: the launch comes back asking to confirm, the choices kept.
    with page.expect_navigation():
        page.click("#launch-form button[type=submit]")
    assert page.url.endswith("/benchmarks/")
    assert "a job holds GPUs of the chosen nodes (sim-01: Slurm job" in page.locator("#held-confirm").inner_text()
    assert page.locator("#rank-order li").all_text_contents() == nodes
    page.check("#id_confirm_held")
    with page.expect_navigation():
        page.click("#launch-form button[type=submit]")
    assert re.search(r"/benchmarks/\d+/$", page.url)
    # Rows arrive over the websocket while the job runs, then the page shows the recorded job.
    page.wait_for_selector("#rows tbody tr", timeout=90_000)
    page.wait_for_function(JOB_ENDED, timeout=90_000)
    assert page.locator("#job-status").text_content().strip() == "succeeded", page.locator("#job-reason").text_content()
    rows = page.locator("#rows tbody tr")
    assert rows.count() == 9  # 1K .. 256K by 2
    assert rows.first.locator("td").first.text_content() == "1024"
    assert {rows.nth(i).locator("td").nth(7).text_content() for i in range(rows.count())} == {"0"}  # #wrong
    assert page.locator("#bandwidth-chart .scatterlayer .trace").count() == 4  # busbw and algbw, both placements
    assert "GB/s" in page.locator("#job-avg").text_content()
    for node in nodes:
        assert node in page.locator(".facts").text_content()
    job_id = re.search(r"/benchmarks/(\d+)/$", page.url).group(1)
    # One figure, labelled: the out-of-place busbw at the largest size (256 KiB), in-place beside it.
    assert page.locator("#job-busbw").evaluate("dd => dd.previousElementSibling.textContent") == \
        "Bus bandwidth, out-of-place at 256.0\xa0KB"
    largest = page.request.get(f"{running_system.base_url}/api/v1/benchmarks/{job_id}").json()["busbw_largest"]
    assert largest["size"] == 256 * 1024
    busbw = largest["out_of_place"]
    assert float(page.locator("#job-busbw").inner_text().removesuffix(" GB/s")) == pytest.approx(busbw, abs=5e-4)
    assert float(page.locator("#job-busbw-inplace").inner_text().removesuffix(" GB/s")) == \
        pytest.approx(largest["in_place"], abs=5e-4)
    last = page.locator("#rows tbody tr").last.locator("td")  # the out-of-place and in-place busbw columns
    assert (float(last.nth(6).inner_text()), float(last.nth(10).inner_text())) == \
        pytest.approx((busbw, largest["in_place"]), abs=5e-4)
    assert page.locator("#job-backend").inner_text() == "gloo"
    for fact in ("job-created", "job-started", "job-finished"):
        assert re.match(LOCAL_TIME, page.locator(f"#{fact} time").inner_text()), fact

    # The job list says the same, as the page wrote it and as its refresh rewrites it.
    page.goto(f"{running_system.base_url}/benchmarks/")
    listed = page.locator(f'#jobs tr[data-job="{job_id}"]')
    page.wait_for_function(f"() => document.querySelector('#jobs tr[data-job=\"{job_id}\"] .started').title !== ''")
    assert listed.locator(".busbw").inner_text() == page.evaluate("v => GpulseFormat.fixed(v, 2)", busbw)
    assert listed.locator(".backend").inner_text() == "gloo"
    assert re.match(LOCAL_TIME, listed.locator(".started").inner_text())

    # One job is not a comparison: the page says how to choose a second.
    page.goto(f"{running_system.base_url}/benchmarks/compare/?id={job_id}")
    assert "tick the box of each job" in page.locator("#compare-empty").inner_text()
    assert page.locator("#compare-chart").count() == 0

    # The overview's job card shows the throughput, the new job's bandwidth included.
    page.goto(f"{running_system.base_url}/")
    page.wait_for_function(
        f"() => document.getElementById('kpi-throughput').textContent.includes('{','.join(nodes)}')", timeout=30_000)
    shown = page.evaluate("v => v.toFixed(2)", busbw)
    assert f"busbw {shown} GB/s out-of-place" in page.locator("#kpi-throughput").text_content()
    assert "in-place" in page.locator("#kpi-throughput").get_attribute("title")


def test_a_user_without_the_permission_cannot_launch(chromium, running_system):
    running_system.stack.manage(
        "shell", "-c",
        "from django.contrib.auth import get_user_model as m; "
        "m().objects.filter(username='viewer').exists() or m().objects.create_user('viewer', password='viewer-pw-123')",
    )
    context = chromium.new_context()
    page = context.new_page()
    try:
        log_in(page, running_system.base_url, "viewer", "viewer-pw-123", "/benchmarks/")
        assert page.locator("#launch-form").count() == 0
        assert "launch_benchmark" in page.content()
        token = context.cookies()
        csrf = next(c["value"] for c in token if c["name"] == "csrftoken")
        response = page.request.post(f"{running_system.base_url}/api/v1/benchmarks",
                                     data='{"nodes": ["sim-01"]}',
                                     headers={"X-CSRFToken": csrf, "Content-Type": "application/json",
                                              "Referer": running_system.base_url + "/benchmarks/"})
        assert response.status == 403
        assert "launch_benchmark permission" in response.json()["error"]
    finally:
        context.close()


def test_a_post_without_csrf_token_is_refused(admin_context, running_system):
    page = admin_context.new_page()
    try:
        response = page.request.post(f"{running_system.base_url}/api/v1/benchmarks",
                                     data='{"nodes": ["sim-01"]}', headers={"Content-Type": "application/json"})
        assert response.status == 403
        assert "CSRF" in response.text()
    finally:
        page.close()


def test_the_job_page_reconnects_after_a_web_restart_and_shows_how_the_job_ended(admin_page, running_system):
    # A job nobody runs: the test writes its events, as node workers and the control worker would.
    client, keys, stack = running_system.redis(), Keys(), running_system.stack
    created = stack.manage("shell", "-c", "from dashboard.benchmarks.models import BenchmarkJob as J; "
                           "print(J.objects.create("
                           "nodes=['sim-01'], ranks_per_node=1, min_bytes=1024, max_bytes=2048, status='running').pk)")
    job = int(created.splitlines()[-1])  # after the shell's own note on what it imported
    row = {"count": 256, "type": "float", "redop": "sum", "time_us": 9.0, "algbw": 0.1, "busbw": 0.1, "wrong": 0,
           "inplace": False}
    job_events.emit(client, keys, job, {"kind": "row", "row": dict(row, size=1024)})
    admin_page.goto(f"{running_system.base_url}/benchmarks/{job}/")
    admin_page.wait_for_selector("#rows tbody tr")  # it came over the websocket
    assert admin_page.text_content("#job-progress-text") == "0 of 2"  # 1024 still has its in-place row to come
    job_events.emit(client, keys, job, {"kind": "row", "row": dict(row, size=1024, inplace=True)})
    admin_page.wait_for_function("() => document.querySelector('#job-progress').value === 1")
    assert admin_page.text_content("#job-progress-text") == "1 of 2"

    with running_system.web_down():  # while the web server is away the job finishes
        job_events.emit(client, keys, job, {"kind": "row", "row": dict(row, size=2048)})
        stack.manage("shell", "-c", "from dashboard.benchmarks.models import BenchmarkJob as J; "
                     f"J.objects.filter(pk={job}).update(status='succeeded')")
        job_events.emit(client, keys, job, {"kind": "final", "status": "succeeded", "reason": ""})
        # Read while the server is still away: once it is back the page may reconnect before any read.
        assert admin_page.text_content("#job-status").strip() == "running"

    admin_page.wait_for_function("() => document.querySelector('#job-status').textContent.trim() === 'succeeded'",
                                 timeout=30_000)
    assert admin_page.locator("#conn-state").count() == 0  # the recorded job: nothing left to follow


def test_the_node_picker_filters_and_a_busy_node_cannot_be_ticked(admin_page, running_system):
    stack = running_system.stack
    busy = int(stack.manage("shell", "-c", "from dashboard.benchmarks.models import BenchmarkJob as J; print(J.objects"
                            ".create(nodes=['sim-03'], ranks_per_node=1, min_bytes=1024, max_bytes=2048,"
                            " status='running').pk)").splitlines()[-1])
    page = admin_page
    try:
        page.goto(f"{running_system.base_url}/benchmarks/")
        choices = page.locator("#node-picker .node-choice")
        assert choices.count() == 4
        page.fill("#node-filter", "IM-03")
        shown = page.locator("#node-picker .node-choice:visible").all_inner_texts()
        assert len(shown) == 1 and " ".join(shown[0].split()).startswith(f"sim-03 running job {busy}")
        box = page.locator("#node-picker input[value='sim-03']")
        assert box.is_disabled()
        box.click(force=True)  # as a person would: a disabled box does not change
        assert not box.is_checked()
        page.evaluate("() => { window.notReloaded = true; }")
        page.press("#node-filter", "Enter")  # filtering does not submit the form
        page.fill("#node-filter", "")
        assert choices.filter(visible=True).count() == 4
        # Ticked out of page order, the ranks still follow the page: that is the order the form sends.
        page.check("#node-picker input[value='sim-02']")
        page.check("#node-picker input[value='sim-01']")
        assert page.locator("#rank-order li").all_text_contents() == ["sim-01", "sim-02"]
        assert page.evaluate("() => window.notReloaded") is True
    finally:
        stack.manage("shell", "-c", "from dashboard.benchmarks.models import BenchmarkJob as J; "
                     f"J.objects.filter(pk={busy}).update(status='cancelled')")


def test_compare_charts_and_tables_two_finished_jobs(admin_page, running_system):
    result = ('{"backend": "gloo", "world_size": 2, "versions": {}, "rows": [{"size": 1024, "count": 256, '
              '"type": "float", "redop": "sum", "time_us": 9.0, "algbw": %s, "busbw": %s, "wrong": 0, '
              '"inplace": false}]}')
    create = ("import json; from dashboard.benchmarks.models import BenchmarkJob as J; print(J.objects.create("
              "nodes=['sim-01', 'sim-02'], ranks_per_node=1, min_bytes=1024, max_bytes=1024, status='succeeded', "
              "result=json.loads({!r})).pk)")
    stack = running_system.stack
    first = int(stack.manage("shell", "-c", create.format(result % (1.0, 1.0))).splitlines()[-1])
    second = int(stack.manage("shell", "-c", create.format(result % (1.5, 1.5))).splitlines()[-1])
    page = admin_page
    page.goto(f"{running_system.base_url}/benchmarks/compare/?id={first}&id={second}")
    page.wait_for_selector("#compare-chart .scatterlayer .trace")
    assert page.locator("#compare-chart .scatterlayer .trace").count() == 2
    assert "gloo" in page.locator("#compare-chart .legendtext").first.text_content()
    assert page.locator("#compare-rows tbody tr td").all_inner_texts() == [
        "1024", "1.000", "1.000", "1.500", "1.500", "+0.500", "+50.0 %"]
