"""Poison entries fed to a running `manage.py ingest`: it never exits, acknowledges and counts each,
and good nodes' frames, rollups and alerts go on, up to a webhook on a real receiver.

Runs on whichever database the suite runs on (CI: SQLite, then PostgreSQL), where a GPU index
of -1 or a 200-character node name once crashed ingest two minutes late, at the rollup flush.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from dashboard.alerts.models import Rule, WebhookEndpoint
from dashboard.healthz.checks import health
from dashboard.live.models import GpuRollup
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from tests.celery_workers import database_url_of_tests, webhook_worker_running
from tests.samples import gpu, sample, stream_of

ROOT = Path(__file__).resolve().parent.parent
# The ingest process and the in-process control worker use their own connections: commit.
pytestmark = pytest.mark.django_db(transaction=True)


def with_gpus(node: str, gpus: list, ts: float) -> dict:
    return {**sample(node, gpus=0, ts=ts), "gpus": gpus}


def poison(now: float, old: float) -> list[bytes]:
    """Entries the sample contract rejects. Those that carry a ts carry an old one: had ingest
    taken them, their minute's rollups would be written on its next tick."""
    long_name = "N" * 1000
    entries = [
        schema.encode(sample("p-throttle", ts=old, throttle=1)),
        schema.encode(sample("p-name", ts=old, name=5)),
        schema.encode(sample("p-interval", ts=old, interval=6e307)),
        schema.encode(sample("p-ts-negative", ts=-1e11)),
        schema.encode(with_gpus("p-index", [gpu(-1), gpu(1)], old)),
        schema.encode(with_gpus("p-index-big", [gpu(40000)], old)),
        schema.encode(sample("n" * 200, ts=old)),
        schema.encode(sample("a/b", ts=old)),
        schema.encode(with_gpus("p-silencer", [gpu(-1, xid=[79])], 1e308)),
        schema.encode(with_gpus("p-10k", [gpu(i, name=long_name) for i in range(10_000)], old)),
        schema.encode({**sample("p-50mb", ts=old), "pad": "x" * 50_000_000}),
        schema.encode(with_gpus("p-300", [gpu(i % 256) for i in range(300)], old)),
        schema.encode(sample("p-interval-nan", ts=old)).replace(b'"interval":1.0', b'"interval":NaN'),
        b"{not json",
        b'{"v": 1, "node": "p-deep", "gpus": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        schema.encode(sample("p-xid", ts=old, xid=["79"])),
        schema.encode(sample("p-processes", ts=old, processes=[{"pid": "1", "name": None}])),
    ]
    for field in ("node", "ts", "interval", "gpus"):
        missing = sample("p-missing", ts=old)
        del missing[field]
        entries.append(schema.encode(missing))
    return entries


def nulled_readings(now: float) -> tuple[list[bytes], int]:
    """Entries whose out-of-range readings become null: (entries, how many readings)."""
    huge = sample("p-readings", ts=now, util=1.85e19, temp=1.85e19, power=1.85e19, sm_clock=1.85e19, mem_clock=-1)
    not_numbers = schema.encode(sample("p-nan", ts=now)).replace(b'"util":50', b'"util":NaN').replace(
        b'"temp":60', b'"temp":Infinity').replace(b'"power":400.0', b'"power":1e400')
    return [schema.encode(huge), not_numbers], 2 * 5 + 2 * 3  # per GPU, two GPUs each


class RunningIngest:
    def __init__(self, client, log_path: Path):
        self.client = client
        self.keys = Keys()
        self.log_path = log_path
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "ingest", "--tick", "0.5", "--consumer", "poison-test"],
            # Entries are acknowledged once their usage is written (every 60 s by default): every second here.
            cwd=ROOT, env={**os.environ, "DATABASE_URL": database_url_of_tests(), "GPULSE_USAGE_FLUSH_INTERVAL": "1"},
            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )

    def heartbeat(self) -> dict:
        raw = self.client.get(self.keys.ingest_heartbeat)
        return orjson.loads(raw) if raw else {}

    def wait_for(self, what: str, condition, timeout: float = 30.0, **good_overrides):
        """Wait until condition() is true, sending good-1's samples meanwhile (with ``good_overrides``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"ingest exited:\n{self.log()[-3000:]}"
            value = condition()
            if value:
                return value
            self.send_good(**good_overrides)
            time.sleep(0.2)
        raise AssertionError(f"{what} within {timeout:.0f} s; heartbeat {self.heartbeat()}\n{self.log()[-3000:]}")

    def send_good(self, **overrides) -> None:
        self.client.xadd(self.keys.telemetry_stream("good-1"),
                         {"s": schema.encode(sample("good-1", ts=time.time(), **overrides))})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def ingest(redis_client, tmp_path):
    running = RunningIngest(redis_client, tmp_path / "ingest.log")
    yield running
    running.stop()


@pytest.fixture
def xid_webhook(receiver, settings):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    Rule.objects.all().delete()
    Rule.objects.create(name="xid", metric="gpu.xid", comparison=">", threshold=0, for_seconds=0, severity="critical")
    WebhookEndpoint.objects.create(name="ops", url=receiver.url + "/hook", secret="s", format="gpulse")
    with webhook_worker_running():
        yield receiver


def test_poison_entries_are_acknowledged_and_counted_while_good_nodes_go_on(ingest, redis_client, xid_webhook):
    keys = Keys()
    ingest.wait_for("ingest's first heartbeat", ingest.heartbeat)
    now = time.time()
    old = (now // 60 - 10) * 60  # ten minutes ago: rolled up and written on the next tick
    rejected = poison(now, old)
    nulled, readings = nulled_readings(now)
    ingest.client.xadd(keys.telemetry_stream("p-empty"), {"x": "an entry without a sample"})
    poisoned = set()
    for entry in rejected + nulled:
        # Held by its collector through an outage: placed at its own ts, in a finished minute.
        ingest.client.xadd(keys.telemetry_stream("good-old"),
                           {"s": schema.encode(sample("good-old", ts=old)), "held": str(now - old)})
        stream = stream_of(entry)
        poisoned.add(stream)
        ingest.client.xadd(stream, {"s": entry})
        ingest.send_good()

    beat = ingest.wait_for(
        "every poison entry counted",
        lambda: (b := ingest.heartbeat()).get("rejected") == len(rejected) + 1 and b.get("nulled") == readings and b,
    )
    assert beat["alerts"]["ok"] and beat["alerts"]["proposals_failed"] == 0
    # Acknowledged with the next rollup write, poison and all: nothing stays pending to fail again.
    ingest.wait_for("every poison entry acknowledged", lambda: not any(
        redis_client.xpending(stream, INGEST_GROUP)["pending"] for stream in poisoned))

    snapshot = ingest.wait_for("good nodes in the snapshot", lambda: orjson.loads(redis_client.get(keys.snapshot)))
    assert snapshot["nodes"]["good-1"]["status"] == "up" and len(snapshot["nodes"]["good-1"]["gpus"]) == 2
    assert not {name for name in snapshot["nodes"] if name.startswith("p-")} - {"p-readings", "p-nan"}
    util, _, temp, power, clock, *_ = snapshot["nodes"]["p-readings"]["gpus"][0]
    assert (util, temp, power, clock) == (None, None, None, None)

    ingest.wait_for("the old minute's rollups written", lambda: GpuRollup.objects.filter(node="good-old").exists())
    assert set(GpuRollup.objects.values_list("node", flat=True)) <= {"good-old", "good-1", "p-readings", "p-nan"}

    # Xid 79 in every sample: ingest evaluates each node's newest sample once a tick.
    requests = ingest.wait_for("the Xid webhook", lambda: xid_webhook.requests, xid=[79])
    event = orjson.loads(requests[0]["body"])
    assert event["group"]["node"] == "good-1" and event["alerts"][0]["node"] == "good-1", event
    assert event["status"] == "firing", event

    ok, checks = health()
    assert ok and checks["alerts"]["ok"] and checks["ingest"]["ok"], checks
    assert f"{len(rejected) + 1} entries rejected" in checks["ingest"]["detail"]
    assert ingest.process.poll() is None
    assert "Traceback" not in ingest.log()
