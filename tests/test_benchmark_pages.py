"""The benchmark pages an operator works with: the launch form's node picker, a job's
page (status, progress, versions, run again) and the compare page (issue 18)."""

import datetime as dt
import json
import re
import time

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dashboard.accounts.models import AuditEvent
from dashboard.benchmarks.cli_job import launch_job
from dashboard.benchmarks.models import BenchmarkJob, JobStatus
from dashboard.benchmarks.tasks import record
from dashboard.benchmarks.throughput import job_throughput
from gpulse import schema
from gpulse.keys import Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db


def with_workers(redis_client, *nodes):
    """Heartbeats as the nodes' benchmark workers write them."""
    for node in nodes:
        redis_client.set(Keys().worker(node), "{}", ex=60)


def picker_row(html: str, node: str) -> str:
    match = re.search(rf'<label class="node-choice[^"]*" data-node="{node}"[^>]*>.*?</label>', html, re.S)
    assert match, f"{node} is not in the picker"
    return match.group(0)


def row(size, busbw, algbw, inplace=False):
    return {"size": size, "count": size // 4, "type": "float", "redop": "sum", "time_us": 10.0, "algbw": algbw,
            "busbw": busbw, "wrong": 0, "inplace": inplace}


def finished_job(rows, backend="auto", ran="gloo", nodes=("bench-a", "bench-b"), **fields):
    versions = {node: {"torch": "2.5.1", "nccl": None, "driver": "550.54", "hostname": node} for node in nodes}
    return BenchmarkJob.objects.create(
        nodes=list(nodes), ranks_per_node=1, min_bytes=1024, max_bytes=4096, backend=backend,
        status=JobStatus.SUCCEEDED, result={"rows": rows, "backend": ran, "versions": versions, "world_size": 2},
        avg_busbw=1.0, **fields)


def test_the_picker_disables_a_busy_node_and_a_workerless_one_saying_why(client, operator_user, live_nodes,
                                                                         redis_client):
    redis_client.set(Keys().node("bench-c"), redis_client.get(Keys().node("bench-a")))
    redis_client.hset(Keys().known_nodes, "bench-c", redis_client.hget(Keys().known_nodes, "bench-a"))
    with_workers(redis_client, "bench-a", "bench-b")
    busy = BenchmarkJob.objects.create(nodes=["bench-b"], ranks_per_node=1, min_bytes=1, max_bytes=2,
                                       status=JobStatus.RUNNING)
    client.force_login(operator_user)
    html = client.get("/benchmarks/").content.decode()
    assert 'id="node-filter"' in html and "<select" not in picker_row(html, "bench-a")
    free = picker_row(html, "bench-a")
    assert "disabled" not in free and "2 GPUs" in free
    assert "disabled" in picker_row(html, "bench-b") and f"running job {busy.pk}" in picker_row(html, "bench-b")
    assert "disabled" in picker_row(html, "bench-c") and "no worker" in picker_row(html, "bench-c")


def launch_form(client, nodes, **fields):
    return client.post("/benchmarks/", {"nodes": nodes, "backend": "gloo", "dtype": "float32", "min_bytes": "1K",
                                        "max_bytes": "4K", "step_factor": "2", "warmup_iters": "1", "iters": "1",
                                        "timeout_seconds": "60", **fields})


def node_errors(response) -> str:
    return re.search(r'<fieldset class="node-picker".*?</fieldset>', response.content.decode(), re.S).group(0)


def test_a_forged_disabled_node_is_refused_with_a_form_error(client, operator_user, live_nodes, redis_client):
    with_workers(redis_client, "bench-a")
    client.force_login(operator_user)
    response = launch_form(client, ["bench-a", "bench-b"])
    assert response.status_code == 409
    errors = node_errors(response)
    assert 'class="errorlist' in errors and "no benchmark worker on bench-b" in errors
    # What was chosen stays chosen for the person to correct.
    assert 'value="bench-a" checked' in errors

    with_workers(redis_client, "bench-b")
    BenchmarkJob.objects.create(nodes=["bench-b"], ranks_per_node=1, min_bytes=1, max_bytes=2,
                                status=JobStatus.QUEUED)
    response = launch_form(client, ["bench-b"])
    assert response.status_code == 409 and "bench-b already run a benchmark" in node_errors(response)
    assert BenchmarkJob.objects.count() == 1


def test_run_again_fills_the_form_with_the_jobs_values_in_its_rank_order(client, operator_user, live_nodes,
                                                                        redis_client):
    with_workers(redis_client, *live_nodes)
    job = BenchmarkJob.objects.create(nodes=["bench-b", "bench-a"], ranks_per_node=2, backend="gloo",
                                      dtype="bfloat16", min_bytes=2048, max_bytes=8 << 20, step_factor=4,
                                      warmup_iters=3, iters=7, correctness_check=False, timeout_seconds=120,
                                      status=JobStatus.FAILED)
    client.force_login(operator_user)
    assert f'href="/benchmarks/?again={job.pk}#launch-form"' in client.get(f"/benchmarks/{job.pk}/").content.decode()
    html = client.get(f"/benchmarks/?again={job.pk}").content.decode()
    assert BenchmarkJob.objects.count() == 1  # filled in, not launched
    # Ticked boxes are submitted in page order: bench-b comes first, as node 0 of the job did.
    assert html.index('value="bench-b" checked') < html.index('value="bench-a" checked')
    assert re.search(r'id="rank-order" start="0"><li>bench-b</li><li>bench-a</li>', html)
    for name, value in [("ranks_per_node", "2"), ("min_bytes", "2K"), ("max_bytes", "8M"), ("step_factor", "4"),
                        ("warmup_iters", "3"), ("iters", "7"), ("timeout_seconds", "120")]:
        assert re.search(rf'name="{name}" value="{value}"', html), name
    assert '<option value="gloo" selected>' in html and '<option value="bfloat16" selected>' in html
    assert not re.search(r'name="correctness_check"[^>]*checked', html)


def test_a_viewer_sees_no_run_again(client, viewer_user):
    job = finished_job([row(1024, 1.0, 1.0)])
    client.force_login(viewer_user)
    assert 'id="run-again"' not in client.get(f"/benchmarks/{job.pk}/").content.decode()


def test_the_job_page_shows_its_progress_while_it_runs_and_its_versions_as_a_table(client, viewer_user):
    running = BenchmarkJob.objects.create(nodes=["bench-a"], ranks_per_node=1, min_bytes=1024, max_bytes=64 << 10,
                                          status=JobStatus.RUNNING)
    client.force_login(viewer_user)
    html = client.get(f"/benchmarks/{running.pk}/").content.decode()
    assert '<progress id="job-progress" max="7" value="0">' in html  # 1K .. 64K by 2
    assert 'class="status status-running" id="job-status">running<' in html
    assert 'href="/benchmarks/"' in html  # back to the list

    done = finished_job([row(1024, 1.0, 1.0)], nodes=["<b>node</b>"])
    html = client.get(f"/benchmarks/{done.pk}/").content.decode()
    assert 'id="job-progress"' not in html
    versions = re.search(r'<table class="table" id="versions"[^>]*>.*?</table>', html, re.S).group(0)
    assert re.findall(r"<th>(.*?)</th>", versions) == ["Node", "torch", "nccl", "driver", "hostname"]
    assert "<td>&lt;b&gt;node&lt;/b&gt;</td><td>2.5.1</td><td>–</td><td>550.54</td>" in versions
    assert "<b>node</b>" not in html
    assert "gloo (asked auto)" in html


def test_compare_needs_two_jobs_and_says_how_to_choose_them(client, viewer_user):
    job = finished_job([row(1024, 1.0, 1.0)])
    failed = BenchmarkJob.objects.create(nodes=["bench-a"], ranks_per_node=1, min_bytes=1, max_bytes=2,
                                         status=JobStatus.FAILED)
    client.force_login(viewer_user)
    for query in ["", f"?id={job.pk}", f"?id={job.pk}&id={failed.pk}"]:
        html = client.get(f"/benchmarks/compare/{query}").content.decode()
        assert 'id="compare-empty"' in html and "tick the box of each job" in html
        assert 'id="compare-rows"' not in html and 'id="compare-data"' not in html
    assert f"No result to compare for <a href=\"/benchmarks/{failed.pk}/\">#{failed.pk}</a>" in html


def test_compare_tables_each_size_with_the_busbw_difference_and_the_backend_that_ran(client, viewer_user):
    base = finished_job([row(1024, 2.0, 2.0), row(1024, 9.9, 9.9, inplace=True), row(2048, 4.0, 4.0)])
    other = finished_job([row(1024, 3.0, 1.5), row(2048, 3.0, 1.5), row(4096, 8.0, 4.0)], backend="nccl",
                         ran="nccl")
    client.force_login(viewer_user)
    html = client.get(f"/benchmarks/compare/?id={other.pk}&id={base.pk}").content.decode()
    assert 'id="compare-empty"' not in html
    jobs = re.search(r'<table class="table" id="compare-jobs">.*?</table>', html, re.S).group(0)
    assert re.search(rf'data-job="{base.pk}">.*?baseline.*?class="backend">gloo \(asked auto\)',
                     jobs, re.S)
    assert re.search(rf'data-job="{other.pk}">.*?class="backend">nccl</td>', jobs, re.S)

    def cells(size):
        found = re.search(rf'<tr data-size="{size}">(.*?)</tr>', html, re.S).group(1)
        return [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", found, re.S)]

    # size | base busbw, algbw | other busbw, algbw, Δ busbw, Δ % (out-of-place rows only)
    assert cells(1024) == ["1024", "2.000", "2.000", "3.000", "1.500", "+1.000", "+50.0 %"]
    assert cells(2048) == ["2048", "4.000", "4.000", "3.000", "1.500", "-1.000", "-25.0 %"]
    assert cells(4096) == ["4096", "–", "–", "8.000", "4.000", "–", "–"]
    assert 'id="compare-data"' in html


def recorded_job(rows, backend="auto", ran="gloo", nodes=("bench-a", "bench-b")):
    """A job ended as the reaper ends one: record() with its first node's report (issue 32)."""
    started = timezone.now() - dt.timedelta(seconds=42)
    job = BenchmarkJob.objects.create(nodes=list(nodes), ranks_per_node=1, min_bytes=1024, max_bytes=16 << 20,
                                      backend=backend, status=JobStatus.RUNNING, started=started)
    record(job, {node: {"result": {"rows": rows, "spec": {"backend": ran}, "versions": {}}} for node in nodes})
    job.refresh_from_db()
    return job


# The numbers: 0.58 GB/s out-of-place and 0.89 in-place at 16 MiB.
SWEEP = [row(1024, 0.01, 0.01), row(1024, 0.02, 0.02, inplace=True),
         row(16 << 20, 0.58, 0.58), row(16 << 20, 0.89, 0.89, inplace=True)]


def test_every_page_quotes_the_out_of_place_busbw_at_the_largest_size_and_the_backend_that_ran(
        client, viewer_user, redis_client):
    job = recorded_job(SWEEP)
    assert job.peak_busbw == 0.58  # the larger, in-place figure was stored before
    client.force_login(viewer_user)

    api = client.get(f"/api/v1/benchmarks/{job.pk}").json()
    assert api["busbw_largest"] == {"size": 16 << 20, "out_of_place": 0.58, "in_place": 0.89}
    assert api["backend_ran"] == "gloo" and api["backend"] == "auto"

    html = client.get("/benchmarks/").content.decode()
    jobs = re.search(r'<table class="table" id="jobs">.*?</table>', html, re.S).group(0)
    assert "busbw out-of-place, largest size (GB/s)" in jobs and "in-place (GB/s)" in jobs
    listed = re.search(rf'<tr data-job="{job.pk}">.*?</tr>', jobs, re.S).group(0)
    assert '<td class="num busbw">0.58</td>' in listed and '<td class="num inplace">0.89</td>' in listed
    assert '<td class="backend">gloo (asked auto)</td>' in listed

    panel = re.search(r'<dl class="kpis" id="throughput">.*?</table>', html, re.S).group(0)
    assert "busbw out-of-place, largest size (GB/s)" in panel
    assert re.search(rf'<tr data-job="{job.pk}">.*?<td class="num busbw" title="at 16.0\xa0MB">0.58</td>'
                     r'<td class="num inplace">0.89</td>', panel, re.S)
    # The overview's job card reads the same figure from the frames' summary.
    latest = job_throughput()["bandwidth"][0]
    assert (latest["busbw"], latest["inplace_busbw"], latest["size"]) == (0.58, 0.89, 16 << 20)

    page = client.get(f"/benchmarks/{job.pk}/").content.decode()
    assert re.search(r"<dt>Bus bandwidth, out-of-place at 16.0\xa0MB</dt>\s*<dd id=\"job-busbw\">0.580 GB/s</dd>", page)
    assert '<dd id="job-busbw-inplace">0.890 GB/s</dd>' in page
    assert '<dd id="job-backend">gloo (asked auto)</dd>' in page

    other = recorded_job(SWEEP, backend="gloo")
    compare = client.get(f"/benchmarks/compare/?id={job.pk}&id={other.pk}").content.decode()
    table = re.search(r'<table class="table" id="compare-jobs">.*?</table>', compare, re.S).group(0)
    assert "busbw out-of-place (GB/s)" in table
    assert re.search(rf'data-job="{job.pk}">.*?class="backend">gloo \(asked auto\)</td>.*?'
                     r'<td class="num busbw">0.580</td>\s*<td class="num inplace">0.890</td>', table, re.S)
    assert re.search(rf'data-job="{other.pk}">.*?class="backend">gloo</td>', table, re.S)


def test_a_queued_job_says_which_backend_was_asked(client, viewer_user):
    job = BenchmarkJob.objects.create(nodes=["bench-a"], ranks_per_node=1, min_bytes=1, max_bytes=2, backend="auto")
    client.force_login(viewer_user)
    listed = re.search(rf'<tr data-job="{job.pk}">.*?</tr>', client.get("/benchmarks/").content.decode(), re.S)
    assert '<td class="backend">asked auto</td>' in listed.group(0)


def local_times(html: str) -> list[str]:
    return re.findall(r'<time class="local-time" datetime="([^"]+)"', html)


def test_every_benchmark_view_says_when_the_job_ran(client, viewer_user, redis_client):
    job = recorded_job(SWEEP)
    other = recorded_job(SWEEP)
    started, finished = (t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (job.started, job.finished))
    created = job.created.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    client.force_login(viewer_user)

    page = client.get(f"/benchmarks/{job.pk}/").content.decode()
    for fact, when in [("job-created", created), ("job-started", started), ("job-finished", finished)]:
        dd = re.search(rf'<dd id="{fact}">(.*?)</dd>', page, re.S).group(1)
        assert local_times(dd) == [when], fact

    listed = re.search(rf'<tr data-job="{job.pk}">.*?</tr>', client.get("/benchmarks/").content.decode(), re.S)
    assert local_times(re.search(r'<td class="started">(.*?)</td>', listed.group(0)).group(1)) == [started]

    compare = client.get(f"/benchmarks/compare/?id={job.pk}&id={other.pk}").content.decode()
    row = re.search(rf'<tr data-job="{job.pk}">.*?</tr>', compare, re.S).group(0)
    assert local_times(re.search(r'<td class="started">(.*?)</td>', row).group(1)) == [started]
    assert re.search(r'<td class="num duration">42\.\d s</td>', row)


def held_by_a_slurm_job(redis_client, node, job="41002", user="alice"):
    """The node's latest sample with a Slurm job's rank on each GPU, as the nvml source reads it from procfs."""
    rank = {"pid": 4242, "name": "python", "user": user, "mem_used": 1 << 30, "cmd": "python train.py",
            "job": job, "step": "0", "pod_uid": None, "container": None}
    redis_client.set(Keys().node(node), schema.encode(sample(node, gpus=2, ts=time.time(), interval=60,
                                                            processes=[rank])))


def test_the_picker_names_who_holds_a_node_and_a_launch_there_needs_a_confirmation(
        client, operator_user, live_nodes, redis_client):
    with_workers(redis_client, *live_nodes)
    held_by_a_slurm_job(redis_client, "bench-b", user="<b>alice</b>")
    client.force_login(operator_user)
    html = client.get("/benchmarks/").content.decode()
    assert "held by" not in picker_row(html, "bench-a")
    held = picker_row(html, "bench-b")
    assert "⚠ held by Slurm job 41002 (user &lt;b&gt;alice&lt;/b&gt;) on 2 of 2 GPUs</span>" in held
    assert "disabled" not in held  # a person may still choose it, once confirmed
    assert 'name="confirm_held"' in html and "<b>alice</b>" not in html

    response = launch_form(client, ["bench-a", "bench-b"])
    assert response.status_code == 400 and BenchmarkJob.objects.count() == 0
    page = node_errors(response)
    assert "a job holds GPUs of the chosen nodes (bench-b: Slurm job 41002 (user &lt;b&gt;alice&lt;/b&gt;)" in page
    assert re.search(r'id="held-confirm".*?<input type="checkbox" name="confirm_held"', page, re.S)
    assert 'value="bench-b" checked' in page  # the choice stays for the person to confirm or change

    response = launch_form(client, ["bench-a", "bench-b"], confirm_held="on")
    assert response.status_code == 302
    job = BenchmarkJob.objects.get()
    assert job.nodes == ["bench-a", "bench-b"]
    launched = AuditEvent.objects.get(action="benchmark.launch")
    assert launched.detail["held"] == {"bench-b": "Slurm job 41002 (user <b>alice</b>) on 2 of 2 GPUs"}


def held_question(html: str) -> str:
    return re.search(r'<div class="held-confirm" id="held-confirm"[^>]*>', html).group(0)


def test_the_picker_asks_about_held_nodes_only_when_a_chosen_one_is_held(client, operator_user, live_nodes,
                                                                         redis_client):
    """Issue 32: the question showed whenever any listed node was held. Its script shows it as a held node is
    ticked (test_oncall_browser.py); without one the page shows it only when the server asks."""
    with_workers(redis_client, *live_nodes)
    held_by_a_slurm_job(redis_client, "bench-b")
    client.force_login(operator_user)
    assert "hidden" in held_question(client.get("/benchmarks/").content.decode())
    response = launch_form(client, ["bench-b"])
    assert response.status_code == 400 and "hidden" not in held_question(response.content.decode())
    # Only bench-a chosen, held bench-b listed beside it: launched without a question.
    assert launch_form(client, ["bench-a"]).status_code == 302
    assert BenchmarkJob.objects.get().nodes == ["bench-a"]


def test_the_api_refuses_a_launch_onto_a_held_node_without_confirm_held(client, operator_user, live_nodes,
                                                                        redis_client):
    with_workers(redis_client, *live_nodes)
    held_by_a_slurm_job(redis_client, "bench-a")
    client.force_login(operator_user)
    spec = {"nodes": ["bench-a"], "backend": "gloo", "min_bytes": "1K", "max_bytes": "4K"}
    response = client.post("/api/v1/benchmarks", spec, content_type="application/json")
    assert response.status_code == 400 and BenchmarkJob.objects.count() == 0
    assert response.json()["fields"]["confirm_held"] == [
        "a job holds GPUs of the chosen nodes (bench-a: Slurm job 41002 (user alice) on 2 of 2 GPUs): choose other"
        " nodes, or confirm launching onto them (the box under the nodes; confirm_held in the API)"]
    response = client.post("/api/v1/benchmarks", {**spec, "confirm_held": True}, content_type="application/json")
    assert response.status_code == 202 and BenchmarkJob.objects.get().nodes == ["bench-a"]


def test_the_cli_refuses_a_held_node_unless_told_confirm_held(live_nodes, redis_client):
    with_workers(redis_client, *live_nodes)
    held_by_a_slurm_job(redis_client, "bench-a")
    with pytest.raises(CommandError, match=r"confirm_held: a job holds GPUs of the chosen nodes \(bench-a: Slurm job"):
        call_command("allreduce", "--nodes", "bench-a", "--backend", "gloo", "--max-bytes", "4K")
    assert BenchmarkJob.objects.count() == 0
    job = launch_job({"op": "all_reduce", "nodes": ["bench-a"], "ranks_per_node": 1, "backend": "gloo",
                      "dtype": "float32", "min_bytes": 1024, "max_bytes": 4096, "factor": 2, "warmup": 1, "iters": 1,
                      "no_check": False, "timeout": 60, "confirm_held": True})
    assert job.nodes == ["bench-a"]


def test_a_node_several_jobs_hold_names_the_largest_and_lists_all_in_its_title(client, operator_user, live_nodes,
                                                                              redis_client):
    one = {"pid": 1, "name": "python", "user": "alice", "mem_used": 1 << 30, "job": "41002"}
    other = {"pid": 2, "name": "python", "user": "bob", "mem_used": 1 << 30, "job": "41003"}
    node = sample("bench-a", gpus=3, ts=time.time(), interval=60)
    for reading, processes in zip(node["gpus"], [[other], [one], [one]], strict=True):
        reading["processes"] = processes
    redis_client.set(Keys().node("bench-a"), schema.encode(node))
    client.force_login(operator_user)
    choice = picker_row(client.get("/benchmarks/").content.decode(), "bench-a")
    assert 'title="held by Slurm job 41002 (user alice) on 2 of 3 GPUs; Slurm job 41003 (user bob) on 1 of 3 GPUs"' \
        in choice
    assert '<span class="node-holder">⚠ held by Slurm job 41002 (user alice) on 2 of 3 GPUs and 1 more</span>' in choice


def test_a_node_a_sample_late_can_be_chosen_and_a_down_one_cannot(client, operator_user, redis_client):
    """A stale node vanished from the form's choices, so a launch a loaded host judged a second late failed
    with Django's "not one of the available choices"; its worker's heartbeat decides, as for an up node."""
    keys, now = Keys(), time.time()
    for name, arrived in (("late-a", now - 25), ("late-b", now - 25), ("gone-c", now - 100)):
        redis_client.set(keys.node(name), schema.encode(sample(name, gpus=2, ts=arrived, interval=10)))
        redis_client.hset(keys.known_nodes, name, json.dumps({"ts": arrived, "arrived": arrived, "interval": 10}))
    with_workers(redis_client, "late-a", "late-b", "gone-c")
    client.force_login(operator_user)
    page = client.get("/benchmarks/").content.decode()
    assert 'value="late-a"' in page and 'value="gone-c"' not in page  # stale: 25 s > 2 × 10; down: past 30 s
    response = launch_form(client, ["late-a", "late-b"], ranks_per_node="1")
    assert response.status_code == 302, node_errors(response)
    assert BenchmarkJob.objects.get().nodes == ["late-a", "late-b"]
    response = launch_form(client, ["gone-c", "late-a"], ranks_per_node="1")
    assert response.status_code == 400 and "gone-c is not one of the available choices" in node_errors(response)
