"""A hostile GPU node's benchmark worker (issue 31): each attack is made with the
node worker's own ACL user (gpulse.redis_acl, as create_role_users makes them)
against the session's real redis-server, and is refused or without effect.

The control side reads as the suite's administrator (the default user), as the
control user would; what matters is what the node's credential could write.
"""

import time
from contextlib import suppress

import orjson
import pytest
import redis
from django.utils import timezone
from kombu.exceptions import OperationalError
from redis.exceptions import NoPermissionError

from dashboard.benchmarks import outcome
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.reaper import reap
from dashboard.benchmarks.tasks import send_to_node, settle, start_job
from dashboard.celery_app import app
from gpulse import job_events
from gpulse.celery_contract import (
    CONTROL_QUEUE,
    SCHEDULER_QUEUE,
    WEBHOOK_QUEUE,
    node_queue,
    node_transport_options,
)
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from gpulse.redis_acl import create_role_users
from gpulse.sweep_spec import SweepSpec
from tests.celery_workers import NodeWorkers, control_worker_running

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = Keys()
P = KEYS.prefix
NODES = ["bench-a", "bench-b"]
# NOPERM as redis-py raises it, or as kombu wraps it.
REFUSED = (NoPermissionError, OperationalError)


@pytest.fixture
def users(redis_server, redis_client):
    """Each role's URL on the session's Redis (its database just emptied), the users made afresh."""
    return create_role_users(redis_server.url, P, NODES)


@pytest.fixture
def attacker_url(users) -> str:
    """bench-a's node worker's own credential."""
    return users["nodeworker-bench-a"]


@pytest.fixture
def attacker(attacker_url):
    client = redis.Redis.from_url(attacker_url)
    yield client
    client.close()


def running_job(nodes: list[str], **fields) -> BenchmarkJob:
    return BenchmarkJob.objects.create(nodes=nodes, ranks_per_node=1, min_bytes=1024, max_bytes=4096,
                                       timeout_seconds=60, status=JobStatus.RUNNING, started=timezone.now(),
                                       **fields)


def beat(redis_client, *nodes: str) -> None:
    """Live heartbeats, as the nodes' workers keep them: no node counts as gone."""
    for node in nodes:
        redis_client.set(KEYS.worker(node), b"{}", ex=60)


ROW = {"size": 1024, "count": 256, "type": "float", "redop": "sum", "time_us": 10.0, "algbw": 0.1, "busbw": 0.1,
       "wrong": 0, "inplace": False}


def report(node: str, status: str = "succeeded", rows=(ROW,), busbw: float | None = None, node_rank: int = 0) -> dict:
    rows = [dict(row, busbw=busbw, algbw=busbw) if busbw is not None else row for row in rows]
    return {"kind": "node_done", "node": node, "node_rank": node_rank, "status": status, "reason": None,
            "crashed": False, "result": {"rows": rows, "spec": {"backend": "gloo"}, "versions": {"torch": "x"}}}


@pytest.mark.parametrize("queue", [CONTROL_QUEUE, WEBHOOK_QUEUE, SCHEDULER_QUEUE])
def test_a_node_worker_cannot_push_a_task_onto_a_control_side_queue(attacker, queue):
    message = orjson.dumps({"body": "", "headers": {"task": "gpulse.alerts.deliver_notification"}})
    with pytest.raises(NoPermissionError):
        attacker.lpush(f"{P}celery:{queue}", message)
    # Nor through kombu's shared bookkeeping, whose keys it once shared.
    with pytest.raises(NoPermissionError):
        attacker.hset(f"{P}celery:unacked", "tag", orjson.dumps([{}, "", queue]))
    with pytest.raises(NoPermissionError):
        attacker.sadd(f"{P}celery:_kombu.binding.{queue}", "x")


def test_a_node_worker_cannot_push_a_task_to_another_nodes_queue(attacker, attacker_url):
    for key in (f"{KEYS.node_broker_prefix('bench-b')}{node_queue('bench-b')}", f"{P}celery:{node_queue('bench-b')}"):
        with pytest.raises(NoPermissionError):
            attacker.lpush(key, b"{}")
    # Through Celery, in bench-b's key space, as the control side sends there.
    with pytest.raises(REFUSED):
        with app.connection_for_write(attacker_url, transport_options=node_transport_options("bench-b")) as conn:
            app.send_task("gpulse.benchmarks.run_node", args=[1, "bench-b", {}], queue=node_queue("bench-b"),
                          producer=app.amqp.Producer(conn))


def test_remote_control_broadcasts_are_refused_to_a_node_and_without_effect_on_control_workers(
    attacker, attacker_url, live_nodes, redis_client
):
    pidbox = f"{P}celery:/0.celery.pidbox"
    with pytest.raises(NoPermissionError):
        attacker.publish(pidbox, b"{}")
    with pytest.raises(NoPermissionError):
        attacker.publish(f"{P}celery:/0.celeryev/worker.online", b"{}")  # no channel at all, nor events
    with control_worker_running():
        # Through Celery with its own credential (kombu drops the refused PUBLISH), then as if a
        # broadcast got through another way (here as the administrator): no worker obeys one.
        with suppress(*REFUSED), app.connection_for_write(attacker_url) as conn:
            app.control.broadcast("cancel_consumer", arguments={"queue": CONTROL_QUEUE}, connection=conn)
            app.control.broadcast("shutdown", connection=conn)
        app.control.broadcast("cancel_consumer", arguments={"queue": CONTROL_QUEUE})
        app.control.broadcast("shutdown")
        time.sleep(1)
        job = BenchmarkJob.objects.create(nodes=live_nodes, ranks_per_node=1, min_bytes=1024, max_bytes=4096,
                                          timeout_seconds=60)
        start_job.delay(job.pk)
        deadline = time.monotonic() + 20
        while BenchmarkJob.objects.get(pk=job.pk).status == JobStatus.QUEUED:
            assert time.monotonic() < deadline, "the control worker stopped consuming"
            time.sleep(0.2)
    # Its node tasks went to each node's own key space.
    for node in live_nodes:
        assert redis_client.llen(f"{KEYS.node_broker_prefix(node)}{node_queue(node)}") == 1


def test_a_forged_node_done_for_another_node_counts_for_nothing(attacker, redis_client):
    theirs = running_job(["bench-b"])  # a job bench-a has no part in
    ours = running_job(NODES)
    beat(redis_client, *NODES)
    forged = report("bench-b", busbw=9999.0)
    for job in (theirs, ours):
        for stream in (KEYS.job_events(job.pk), KEYS.job_node_events(job.pk, "bench-b")):
            with pytest.raises(NoPermissionError):
                attacker.xadd(stream, {"e": orjson.dumps(forged)})
        with pytest.raises(NoPermissionError):
            attacker.set(KEYS.job_node_cancel(job.pk, "bench-b"), 1)
        # What it can write: its own stream, naming bench-b.
        job_events.emit(attacker, KEYS, job.pk, forged, node="bench-a")
    rejected = outcome.REJECTED["event naming another node"]
    for job in (theirs, ours):
        progress = outcome.read_progress(job_events.history(redis_client, KEYS, job.pk, job.nodes), job.nodes, job.pk)
        assert "bench-b" not in progress.reports and "bench-a" not in progress.reports
        settle(job)
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING  # bench-b still has not reported
    assert outcome.REJECTED["event naming another node"] == rejected + 1  # in the job it is part of


def test_a_result_counts_only_from_the_rank_0_nodes_own_stream(users, redis_client):
    job = running_job(NODES)
    beat(redis_client, *NODES)
    rank0 = redis.Redis.from_url(users["nodeworker-bench-a"])
    rank1 = redis.Redis.from_url(users["nodeworker-bench-b"])
    # bench-b (rank 1) streams a row and reports first, claiming rank 0 with a record bandwidth.
    job_events.emit(rank1, KEYS, job.pk, {"kind": "row", "row": dict(ROW, busbw=9999.0)}, node="bench-b")
    job_events.emit(rank1, KEYS, job.pk, report("bench-b", busbw=9999.0, node_rank=0), node="bench-b")
    job_events.emit(rank0, KEYS, job.pk, {"kind": "row", "row": ROW}, node="bench-a")
    job_events.emit(rank0, KEYS, job.pk, report("bench-a"), node="bench-a")
    rows_rejected = outcome.REJECTED["row from a node other than rank 0's"]
    settle(job)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [row["busbw"] for row in job.result["rows"]] == [0.1] and job.peak_busbw == 0.1
    assert outcome.REJECTED["row from a node other than rank 0's"] == rows_rejected + 1


def test_a_malformed_event_row_is_counted_and_the_reaper_settles_that_job_and_the_others(attacker, redis_client,
                                                                                        caplog):
    bad = running_job(["bench-a"])
    good = running_job(["bench-b"])
    beat(redis_client, *NODES)
    stream = KEYS.job_node_events(bad.pk, "bench-a")
    for fields in ({"e": b"not json"}, {"x": b"1"}, {"e": b"[1, 2]"}, {"e": b'{"kind": "node_done"}'},
                   {"e": b'{"kind": "node_done", "status": "succeeded", "result": {"rows": "x"}}'}):
        attacker.xadd(stream, fields)
    job_events.emit(attacker, KEYS, bad.pk, report("bench-a", status="failed") | {"reason": "boom"}, node="bench-a")
    job_events.emit(redis_client, KEYS, good.pk, report("bench-b"), node="bench-b")
    before = sum(outcome.REJECTED.values())
    reap()
    reap()  # a second pass reads the same rows: counted and logged once
    bad.refresh_from_db()
    good.refresh_from_db()
    assert (bad.status, bad.reason) == (JobStatus.FAILED, "bench-a: boom")
    assert good.status == JobStatus.SUCCEEDED
    assert sum(outcome.REJECTED.values()) == before + 5
    assert "could not be settled" not in caplog.text


def test_a_spec_past_the_launch_forms_bounds_is_refused_by_the_node_and_reported_failed(users, redis_client,
                                                                                       tmp_path):
    workers = NodeWorkers(users["nodeworker-bench-a"], tmp_path)
    workers.start("bench-a")
    # nccl: on a machine without CUDA, a node that took the spec would still fail, without spawning ranks.
    base = SweepSpec(backend="nccl", min_bytes=1024, max_bytes=4096, ranks_per_node=1, nnodes=1,
                     master_addr="127.0.0.1", master_port=29599, timeout=60).to_dict()
    attacks: dict[int, tuple[dict, str]] = {
        1: ({"ranks_per_node": 100000}, "ranks per node must be 1 to 64, not 100000"),
        2: ({"max_bytes": 32 << 40}, "32768G is over this node's limit"),
        3: ({"master_addr": "evil host; rm -rf /"}, "is not a host name or an IP address"),
        4: ({"ranks_per_node": "3"}, "sweep parameter ranks_per_node has the wrong type"),
    }
    try:
        for job_id, (change, _why) in attacks.items():
            send_to_node("bench-a", "gpulse.benchmarks.run_node", [job_id, "bench-a", {**base, **change}])
        deadline = time.monotonic() + 60
        for job_id, (_change, why) in attacks.items():
            while not (done := [e.event for e in job_events.history(redis_client, KEYS, job_id, ["bench-a"])
                                if e.event and e.event["kind"] == "node_done"]):
                assert time.monotonic() < deadline, (tmp_path / "worker-bench-a.log").read_text()[-3000:]
                time.sleep(0.2)
            assert done[0]["status"] == JobStatus.FAILED
            assert why in done[0]["reason"] and done[0]["reason"].startswith("its benchmark worker could not run")
    finally:
        workers.stop()
    log = (tmp_path / "worker-bench-a.log").read_text()
    assert "NOPERM" not in log, log[-3000:]
    assert redis_client.llen(f"{P}celery:{CONTROL_QUEUE}") == 0  # it sent the control host nothing
