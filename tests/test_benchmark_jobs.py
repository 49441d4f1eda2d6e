"""Benchmark jobs end to end: API -> control worker -> node workers -> torch ranks -> result."""

import json
import time

import psutil
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from dashboard.benchmarks.models import BenchmarkJob, JobStatus
from gpulse.keys import Keys
from tests.processes import assert_gone

pytestmark = pytest.mark.django_db(transaction=True)


SMALL = {"backend": "gloo", "min_bytes": "1K", "max_bytes": "64K", "iters": 3, "warmup_iters": 1, "timeout_seconds": 60}


def post(client, **fields):
    return client.post("/api/v1/benchmarks", json.dumps(fields), content_type="application/json")


def wait_for(job_id, statuses, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = BenchmarkJob.objects.get(pk=job_id)
        if job.status in statuses:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job.status} after {timeout} s")


def ranks_of(node_workers) -> list[psutil.Process]:
    """The rank processes the node workers run now."""
    found = []
    for worker in node_workers.processes.values():
        for child in psutil.Process(worker.pid).children(recursive=True):
            if "workers.collective" in child.cmdline():
                found.append(child)
    return found


def wait_for_ranks(node_workers, count: int, timeout: float = 30) -> list[psutil.Process]:
    deadline = time.time() + timeout
    while len(ranks := ranks_of(node_workers)) < count:
        assert time.time() < deadline, f"{count} rank processes did not start"
        time.sleep(0.1)
    return ranks


def test_a_user_without_the_permission_gets_403(client, viewer_user, live_nodes):
    client.force_login(viewer_user)
    response = post(client, nodes=live_nodes, **SMALL)
    assert response.status_code == 403
    assert BenchmarkJob.objects.count() == 0


def test_a_session_post_without_csrf_token_is_refused(operator_user, live_nodes):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_user)
    assert post(client, nodes=live_nodes, **SMALL).status_code == 403
    assert client.post("/benchmarks/", {"nodes": live_nodes}).status_code == 403


def test_bad_fields_get_400_naming_them(client, operator_user, live_nodes):
    client.force_login(operator_user)
    response = post(client, nodes=["nope"], **{**SMALL, "max_bytes": "lots"})
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert "nodes" in fields and "bad size 'lots'" in fields["max_bytes"][0]
    response = post(client, nodes=live_nodes, **{**SMALL, "min_bytes": "1M", "max_bytes": "1K"})
    assert response.status_code == 400 and "smaller than min bytes" in response.content.decode()


def test_overlapping_nodes_get_409_and_the_rate_limit_429(client, operator_user, live_nodes, settings):
    client.force_login(operator_user)
    BenchmarkJob.objects.create(created_by=operator_user, nodes=["bench-a"], ranks_per_node=1, min_bytes=1, max_bytes=2,
                                status=JobStatus.RUNNING)
    response = post(client, nodes=live_nodes, **SMALL)
    assert response.status_code == 409 and "bench-a already run" in response.json()["error"]
    settings.GPULSE_BENCHMARK_RATE = "1/600"
    response = post(client, nodes=live_nodes, **SMALL)
    assert response.status_code == 429 and 0 < int(response["Retry-After"]) <= 601


def test_a_two_node_job_runs_real_ranks_and_records_nccl_tests_rows(
    client, operator_user, live_nodes, node_workers, control_worker, redis_client
):
    node_workers.start(*live_nodes)
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, ranks_per_node=1, **SMALL)
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    job = wait_for(job_id, {"succeeded", "failed", "timed_out"}, timeout=90)
    assert job.status == "succeeded", job.reason
    assert job.created_by == operator_user and job.result["world_size"] == 2
    rows = job.result["rows"]
    assert sorted({r["size"] for r in rows}) == [1024 * 2**i for i in range(7)]
    assert all(r["wrong"] == 0 and r["busbw"] == pytest.approx(r["algbw"]) for r in rows)  # n=2: factor 1
    assert job.avg_busbw > 0 and set(job.result["versions"]) == set(live_nodes)
    api = client.get(f"/api/v1/benchmarks/{job_id}").json()
    assert api["status"] == "succeeded" and len(api["result"]["rows"]) == len(rows)
    kinds = [json.loads(f[b"e"])["kind"] for _, f in redis_client.xrange(Keys().job_node_events(job_id, "bench-a"))]
    assert kinds.count("row") == len(rows) and kinds[-1] == "node_done"  # rank 0's node streams the rows
    assert [json.loads(f[b"e"])["kind"] for _, f in redis_client.xrange(Keys().job_events(job_id))] == ["final"]
    assert not ranks_of(node_workers)


def wait_for_rows(redis_client, job_id, timeout: float = 60) -> None:
    """Wait until rank 0 streams rows: every node's ranks are in the collective."""
    deadline = time.time() + timeout
    stream = Keys().job_node_events(job_id, "bench-a")  # rank 0's node
    while not any(json.loads(f[b"e"])["kind"] == "row" for _, f in redis_client.xrange(stream)):
        assert time.time() < deadline, "no row came"
        time.sleep(0.2)


def test_killing_a_node_worker_mid_job_fails_the_job_naming_it_first_and_leaves_no_rank(
    client, operator_user, live_nodes, node_workers, control_worker, redis_client
):
    node_workers.start(*live_nodes)
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, ranks_per_node=1, **{**SMALL, "max_bytes": "64M", "iters": 50,
                                                                    "timeout_seconds": 40})
    job_id = response.json()["id"]
    ranks = wait_for_ranks(node_workers, 2)
    wait_for_rows(redis_client, job_id)
    node_workers.kill("bench-b")
    job = wait_for(job_id, {"failed", "timed_out"}, timeout=30)
    # bench-a's ranks lost their peer and said so; the cause is the worker that died.
    assert job.status == "failed"
    assert job.reason.startswith("bench-b: its benchmark worker stopped during the job"), job.reason
    assert "then bench-a: " in job.reason and "no report from" not in job.reason
    assert_gone(ranks)


def test_a_running_job_can_be_cancelled(client, operator_user, live_nodes, node_workers, control_worker, redis_client):
    node_workers.start(*live_nodes)
    client.force_login(operator_user)
    job_id = post(client, nodes=live_nodes, ranks_per_node=1,
                  **{**SMALL, "max_bytes": "256M", "iters": 200}).json()["id"]
    ranks = wait_for_ranks(node_workers, 2)
    response = client.post(f"/api/v1/benchmarks/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert_gone(ranks)
    assert client.post(f"/api/v1/benchmarks/{job_id}/cancel").status_code == 409


def test_a_redelivered_start_never_sends_a_second_copy(operator_user, live_nodes, redis_client):
    from dashboard.benchmarks.tasks import claim_and_dispatch

    job = BenchmarkJob.objects.create(created_by=operator_user, nodes=live_nodes, ranks_per_node=1, min_bytes=1024,
                                      max_bytes=1024, timeout_seconds=10)
    first, claimed = claim_and_dispatch(job.pk)
    assert claimed and first.status == "running" and first.rendezvous.startswith("127.0.0.1:")
    again, claimed_again = claim_and_dispatch(job.pk)
    assert not claimed_again and again.status == "running"
    for node in live_nodes:
        assert redis_client.llen(f"gpulse:nodeq:{node}:node.{node}") == 1  # one task per node, not two


def test_the_cli_runs_a_recorded_job_across_nodes_through_the_workers(live_nodes, node_workers, control_worker, capsys):
    from django.core.management import call_command

    node_workers.start(*live_nodes)
    call_command("allreduce", "--nodes", ",".join(live_nodes), "--ranks-per-node", "1", "--backend", "gloo",
                 "--min-bytes", "1K", "--max-bytes", "16K", "--iters", "3", "--warmup", "1")
    out = capsys.readouterr().out
    assert "# Avg bus bandwidth" in out and "ranks 2 (2 node(s) x 1)" in out
    assert len([line for line in out.splitlines() if line.strip() and not line.startswith("#")]) == 5
    job = BenchmarkJob.objects.get()
    assert job.status == "succeeded" and job.created_by is None


def test_the_cli_names_the_nodes_that_are_up_when_one_is_not(live_nodes):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"nodes up now: bench-a, bench-b"):
        call_command("allreduce", "--nodes", "bench-a,ghost", "--backend", "gloo")


def form_post(client, **fields):
    return client.post("/benchmarks/", {**{k: str(v) for k, v in SMALL.items()}, "step_factor": "2",
                                        "correctness_check": "on", **fields})


@pytest.mark.parametrize("max_bytes", ["1000000G", str(2**63), 2**63, "9" * 5000])
def test_a_message_size_past_the_configured_cap_gets_400_not_a_job(client, operator_user, live_nodes, max_bytes):
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, **{**SMALL, "max_bytes": max_bytes})
    assert response.status_code == 400, response.content
    assert "max_bytes" in response.json()["fields"]
    assert BenchmarkJob.objects.count() == 0


def test_the_cap_comes_from_the_setting_and_the_message_names_it(client, operator_user, live_nodes, settings):
    settings.GPULSE_BENCHMARK_MAX_BYTES = 1 << 20
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, **{**SMALL, "max_bytes": "2M"})
    assert response.status_code == 400
    message = response.json()["fields"]["max_bytes"][0]
    assert "1M" in message and "GPULSE_BENCHMARK_MAX_BYTES" in message
    response = form_post(client, nodes=live_nodes, min_bytes="2M", max_bytes="2M")
    assert response.status_code == 400 and "GPULSE_BENCHMARK_MAX_BYTES" in response.content.decode()
    assert BenchmarkJob.objects.count() == 0


@pytest.mark.parametrize("field, value", [
    ("ranks_per_node", 65), ("ranks_per_node", 10**30), ("ranks_per_node", 0),
    ("iters", 10**6), ("iters", 0), ("iters", 1.5), ("warmup_iters", -1), ("warmup_iters", 10**6),
    ("step_factor", 1), ("step_factor", 17), ("step_factor", 10**30),
    ("timeout_seconds", 5), ("timeout_seconds", 10**9), ("timeout_seconds", float("inf")),
    ("min_bytes", "0"), ("min_bytes", -1),
])
def test_every_numeric_field_is_bounded_with_a_400(client, operator_user, live_nodes, field, value):
    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, **{**SMALL, field: value})
    assert response.status_code == 400, response.content
    assert response.json()["fields"], "the answer names what to correct"
    assert BenchmarkJob.objects.count() == 0


def test_a_node_listed_twice_gets_400(client, operator_user, live_nodes):
    client.force_login(operator_user)
    response = post(client, nodes=["bench-a", "bench-b", "bench-a"], **SMALL)
    assert response.status_code == 400
    assert "bench-a is listed twice" in response.json()["fields"]["nodes"][0]
    response = form_post(client, nodes=["bench-a", "bench-a"])
    assert response.status_code == 400 and "bench-a is listed twice" in response.content.decode()
    assert BenchmarkJob.objects.count() == 0


@pytest.fixture
def other_operator(db):
    user = get_user_model().objects.create_user("oscar", password="pw-oscar-123")
    user.user_permissions.add(Permission.objects.get(codename="launch_benchmark"))
    return user


def queued_job(user) -> BenchmarkJob:
    return BenchmarkJob.objects.create(created_by=user, nodes=["bench-a"], ranks_per_node=1, min_bytes=1,
                                       max_bytes=2)


def test_only_the_launcher_may_cancel_a_job(client, operator_user, other_operator):
    job = queued_job(operator_user)
    client.force_login(other_operator)
    response = client.post(f"/api/v1/benchmarks/{job.pk}/cancel")
    assert response.status_code == 403
    assert "benchmarks.cancel_any_benchmark" in response.json()["error"]
    assert client.post(f"/benchmarks/{job.pk}/cancel/").status_code == 403
    assert "id=\"cancel\"" not in client.get(f"/benchmarks/{job.pk}/").content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    client.force_login(operator_user)
    assert "id=\"cancel\"" in client.get(f"/benchmarks/{job.pk}/").content.decode()
    response = client.post(f"/api/v1/benchmarks/{job.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_a_holder_of_cancel_any_may_cancel_anyones_job(client, operator_user, viewer_user):
    viewer_user.user_permissions.add(Permission.objects.get(codename="cancel_any_benchmark"))
    first, second = queued_job(operator_user), queued_job(None)
    client.force_login(viewer_user)
    assert client.post(f"/api/v1/benchmarks/{first.pk}/cancel").json()["status"] == "cancelled"
    response = client.post(f"/benchmarks/{second.pk}/cancel/")
    assert response.status_code == 302
    second.refresh_from_db()
    assert second.status == JobStatus.CANCELLED


def kill_rank_of(node_workers, node: str) -> None:
    worker = psutil.Process(node_workers.processes[node].pid)
    rank = next(c for c in worker.children(recursive=True) if "workers.collective" in c.cmdline())
    rank.kill()


def test_a_job_whose_control_worker_is_killed_mid_run_ends_within_30_s_with_its_result(
    client, operator_user, live_nodes, node_workers, control_process, redis_client
):
    node_workers.start(*live_nodes)
    control_process.start()
    client.force_login(operator_user)
    job_id = post(client, nodes=live_nodes, ranks_per_node=1,
                  **{**SMALL, "max_bytes": "4M", "iters": 10}).json()["id"]
    wait_for_ranks(node_workers, 2)
    control_process.kill()  # as Docker does after its stop grace period
    killed = time.time()
    control_process.start()
    job = wait_for(job_id, {"succeeded", "failed", "timed_out"}, timeout=30 - (time.time() - killed))
    assert job.status == "succeeded", job.reason
    assert sorted({r["size"] for r in job.result["rows"]}) == [1024 * 2**i for i in range(13)]
    assert job.avg_busbw > 0 and set(job.result["versions"]) == set(live_nodes)
    response = post(client, nodes=live_nodes, ranks_per_node=1, **SMALL)  # its nodes are free again
    assert response.status_code == 202, response.content


def test_a_node_failing_while_no_control_worker_runs_fails_the_job_naming_that_node(
    client, operator_user, live_nodes, node_workers, control_process, redis_client
):
    node_workers.start(*live_nodes)
    control_process.start()
    client.force_login(operator_user)
    job_id = post(client, nodes=live_nodes, ranks_per_node=1,
                  **{**SMALL, "max_bytes": "64M", "iters": 50}).json()["id"]
    ranks = wait_for_ranks(node_workers, 2)
    wait_for_rows(redis_client, job_id)
    control_process.kill()
    killed = time.time()
    kill_rank_of(node_workers, "bench-b")
    control_process.start()
    job = wait_for(job_id, {"succeeded", "failed", "timed_out"}, timeout=30 - (time.time() - killed))
    assert job.status == "failed"
    # bench-b's rank was killed; bench-a's only lost its peer.
    assert job.reason.startswith("bench-b: rank 1 exited with code -9 (SIGKILL)"), job.reason
    assert "then bench-a: " in job.reason
    assert_gone(ranks)


def test_a_launch_on_a_node_whose_worker_is_gone_is_refused_naming_it(
    client, operator_user, live_nodes, node_workers, redis_client
):
    from gpulse.heartbeat import TTL_S

    client.force_login(operator_user)
    response = post(client, nodes=live_nodes, **SMALL)  # no worker has ever run there
    assert response.status_code == 409
    assert "no benchmark worker on bench-a, bench-b" in response.json()["error"]
    node_workers.start(*live_nodes)
    node_workers.kill("bench-b")
    deadline = time.time() + TTL_S + 5
    while redis_client.exists(Keys().worker("bench-b")):  # its heartbeat expires
        assert time.time() < deadline, "the heartbeat of a killed worker did not expire"
        time.sleep(0.2)
    response = post(client, nodes=live_nodes, **SMALL)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error.startswith("no benchmark worker on bench-b:") and "bench-a" not in error
    response = form_post(client, nodes=live_nodes, dtype="float32")
    assert response.status_code == 409, response.content.decode()[-3000:]
    assert "no benchmark worker on bench-b" in response.content.decode()
    assert redis_client.exists(Keys().worker("bench-a"))  # the live worker still beats
    assert BenchmarkJob.objects.count() == 0


def test_the_control_worker_holds_no_thread_while_a_job_runs(
    client, operator_user, live_nodes, node_workers, control_process, redis_client
):
    node_workers.start(*live_nodes)
    control_process.start(concurrency=1)
    client.force_login(operator_user)
    long_job = post(client, nodes=["bench-a"], ranks_per_node=1,
                    **{**SMALL, "max_bytes": "256M", "iters": 200}).json()["id"]
    wait_for_ranks(node_workers, 1)
    other = post(client, nodes=["bench-b"], ranks_per_node=1, **SMALL).json()["id"]
    # Its one thread is free: the second job is claimed while the first still runs.
    assert wait_for(other, {"running", "succeeded"}, timeout=5)
    assert BenchmarkJob.objects.get(pk=long_job).status == "running"
    assert client.post(f"/api/v1/benchmarks/{long_job}/cancel").json()["status"] == "cancelled"


def test_a_node_that_cannot_run_its_task_says_why_at_once_not_at_the_jobs_limit(
    operator_user, live_nodes, node_workers, control_worker
):
    from django.utils import timezone

    from dashboard.benchmarks.tasks import send_to_node

    # A control side a version ahead of the node's worker (a rolling upgrade) sends a parameter the
    # worker does not know: its task fails before any rank starts. Before, it reported nothing and
    # the job waited out its 60 s limit (plus 30 s of grace) to end as "no report".
    node_workers.start("bench-a")
    job = BenchmarkJob.objects.create(created_by=operator_user, nodes=["bench-a"], ranks_per_node=1, min_bytes=1024,
                                      max_bytes=65536, timeout_seconds=60, status=JobStatus.RUNNING,
                                      started=timezone.now())
    spec = {**job.sweep_spec(0, "127.0.0.1", 29599).to_dict(), "algorithm": "ring"}
    send_to_node("bench-a", "gpulse.benchmarks.run_node", [job.pk, "bench-a", spec])
    job = wait_for(job.pk, {"failed", "timed_out"}, timeout=20)
    assert job.status == "failed"
    assert job.reason == "bench-a: its benchmark worker could not run the job: unknown sweep parameters: algorithm"


def done(node: str, status: str = "succeeded", reason: str | None = None, crashed: bool = False) -> dict:
    return {"kind": "node_done", "node": node, "node_rank": 0 if node == "bench-a" else 1, "status": status,
            "reason": reason, "crashed": crashed, "result": {}}


GLOO = "rank 0 failed: Connection closed by peer [127.0.0.1]:29501"
NODES = ["bench-a", "bench-b"]


def progress_of(events):
    """read_progress of (entry id, event) pairs, each on the stream of the node it names."""
    from dashboard.benchmarks.outcome import read_progress
    from gpulse.job_events import Entry

    return read_progress([Entry(entry_id, event, event["node"]) for entry_id, event in events], NODES)


def test_a_live_node_that_has_not_reported_yet_is_waited_for_not_named_silent():
    from dashboard.benchmarks.outcome import FAILURE_SETTLE_S, decide

    events = [("1000-0", {"kind": "started", "node": "bench-a"}), ("1001-0", {"kind": "started", "node": "bench-b"}),
              ("2000-0", done("bench-a", "failed", GLOO))]
    progress = progress_of(events)
    nodes = ["bench-a", "bench-b"]
    assert decide(nodes, progress, set(), 2000 + 1000, 10**9, 60) is None  # bench-b may yet say why
    late = decide(nodes, progress, set(), 2000 + FAILURE_SETTLE_S * 1000, 10**9, 60)
    assert late.status == "failed" and late.reason == f"bench-a: {GLOO} (no report from bench-b (still running))"
    gone = decide(nodes, progress, {"bench-b"}, 3000, 10**9, 60)
    assert gone.reason == f"bench-b: its benchmark worker stopped during the job (then bench-a: {GLOO})"


def test_the_node_whose_rank_crashed_leads_the_reason_whichever_reported_first():
    from dashboard.benchmarks.outcome import decide

    crash = "rank 1 exited with code -9 (SIGKILL)"
    events = [("2000-0", done("bench-a", "failed", GLOO)), ("2001-0", done("bench-b", "failed", crash, crashed=True))]
    outcome = decide(["bench-a", "bench-b"], progress_of(events), set(), 2001, 10**9, 60)
    assert outcome.status == "failed" and outcome.reason == f"bench-b: {crash} (then bench-a: {GLOO})"


def test_past_its_deadline_a_job_names_the_nodes_that_never_started_and_those_still_running():
    from dashboard.benchmarks.outcome import decide

    events = [("1000-0", {"kind": "started", "node": "bench-a"})]
    progress = progress_of(events)
    assert decide(["bench-a", "bench-b"], progress, set(), 4999, 5000, 60) is None
    outcome = decide(["bench-a", "bench-b"], progress, set(), 5000, 5000, 60)
    assert outcome.status == "timed_out"
    assert outcome.reason == ("no report within the job's 60 s limit from bench-a (still running),"
                              " bench-b (never started)")
