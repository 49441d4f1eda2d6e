"""The benchmark pages an operator works with: the launch form's node picker, a job's
page (status, progress, versions, run again) and the compare page (issue 18)."""

import re

import pytest

from dashboard.benchmarks.models import BenchmarkJob, JobStatus
from gpulse.keys import Keys

pytestmark = pytest.mark.django_db


def with_workers(redis_client, *nodes):
    """Heartbeats as the nodes' benchmark workers write them."""
    for node in nodes:
        redis_client.set(Keys().worker(node), "{}", ex=60)


def picker_row(html: str, node: str) -> str:
    match = re.search(rf'<label class="node-choice[^"]*" data-node="{node}">.*?</label>', html, re.S)
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


def launch_form(client, nodes):
    return client.post("/benchmarks/", {"nodes": nodes, "backend": "gloo", "dtype": "float32", "min_bytes": "1K",
                                        "max_bytes": "4K", "step_factor": "2", "warmup_iters": "1", "iters": "1",
                                        "timeout_seconds": "60"})


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
    assert re.search(rf'data-job="{base.pk}">.*?baseline.*?class="backend">gloo <small class="muted">\(asked auto\)',
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
