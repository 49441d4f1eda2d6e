"""A live gpulse web server for /metrics scrapers: the ASGI app under uvicorn,
its database seeded and a cluster written to Redis as ingest leaves it."""

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import orjson
import redis
from prometheus_client.parser import text_string_to_metric_families

from dashboard.health.node_health import NodeHealthBook
from gpulse import schema
from gpulse.keys import Keys
from gpulse.status import UP
from tests.samples import gpu, sample
from tests.test_node_health import NVLINK_DOWN, finding, with_health
from tests.web_server import uvicorn_server

TOKEN = "metrics-token-0123456789-abcdefghijklmnop"
OWNED = {"pid": 4242, "name": "python", "user": "dana", "job": "41007", "mem_used": 2 << 30}
# A user name as a node may send it: quotes, a backslash and a newline to escape in a label value.
ODD_USER = 'o"brien\\x\ny'

# Rows the scraped app finds in its database: what ingest, the control worker
# and the alert evaluator would have written.
SEED_DATABASE = """
import django, datetime as dt
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.utils import timezone
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.alerts.models import Alert, Rule, Transition, fingerprint
now = timezone.now()
job = dict(ranks_per_node=1, min_bytes=1024, max_bytes=1 << 20)
BenchmarkJob.objects.create(nodes=["n1", "n2"], status="succeeded", avg_busbw=10.0,
                            finished=now - dt.timedelta(hours=1), **job)
BenchmarkJob.objects.create(nodes=["n1", "n2"], status="succeeded", avg_busbw=42.5, finished=now, **job)
BenchmarkJob.objects.create(nodes=["n1"], status="succeeded", avg_busbw=None, finished=now, **job)
BenchmarkJob.objects.create(nodes=["n2"], status="failed", reason="rank 1 died", **job)
BenchmarkJob.objects.create(nodes=["n2"], status="running", **job)
rule = Rule.objects.create(name="metrics test: hot GPU", metric="gpu.temp", threshold=85)
alert = Alert.objects.create(fingerprint=fingerprint(rule.id, "n1", 0), rule=rule, node="n1", gpu=0,
                             status="firing", status_since=now)
Transition.objects.create(alert=alert, old="inactive", new="pending", reason="temp 90 > 85", created=now)
Transition.objects.create(alert=alert, old="pending", new="firing", reason="temp 90 > 85", created=now)
"""


def write_cluster(client: redis.Redis) -> None:
    """Write nodes as ingest and the collectors leave them: latest keys and the known-nodes hash."""
    keys = Keys()
    now = time.time()
    # A long interval keeps the statuses steady however slowly the test runs.
    interval = 60.0
    nodes = {
        # n1 GPU 0: dana's job, busy; GPU 1: no fan (null → not exported), throttled by the power cap, no process.
        "n1": sample("n1", ts=now, interval=interval, gpus=0) | {"gpus": [
            gpu(0, util=97, temp=66, power=612.4, fan=35, energy=48213775401, processes=[OWNED]),
            gpu(1, util=12, temp=41, power=150.5, throttle=["sw_power_cap"], ecc_uncorrected=None),
        ]},
        # n2 GPU 1 fell off the bus: lost, every reading null; GPU 2 held but idle, by a user the node names oddly.
        "n2": sample("n2", ts=now, interval=interval, gpus=0) | {"gpus": [
            gpu(0, util=50),
            {**gpu(1), **dict.fromkeys(schema.GPU_METRIC_NAMES), "lost": True, "throttle": None},
            gpu(2, util=2, processes=[{**OWNED, "user": ODD_USER, "job": None}]),
        ]},
        # Late by more than two intervals: stale, not yet down.
        "late": sample("late", ts=now - 2.5 * interval, interval=interval, gpus=2),
    }
    for name, node in nodes.items():
        client.set(keys.node(name), schema.encode(node), ex=600)
        client.hset(keys.known_nodes, name, json.dumps({"ts": node["ts"], "interval": node["interval"]}))
    # Its latest key expired long ago: down.
    client.hset(keys.known_nodes, "dead", json.dumps({"ts": now - 3600, "interval": interval}))
    # Health as ingest writes it: n1 failing (GPU 3's NVLink, and its PCIe check not supported on GPU 0), n2 healthy.
    book = NodeHealthBook()
    book.update("n1", with_health("n1", NVLINK_DOWN, finding("pcie_link", "unknown", "not supported", gpu=0)))
    book.update("n2", with_health("n2"))
    book.tick(now, {name: SimpleNamespace(status=UP) for name in ("n1", "n2")}, [])
    client.hset(keys.health, mapping={name: orjson.dumps(book.nodes[name].record()) for name in ("n1", "n2")})


@contextmanager
def serve_metrics(redis_url: str, state: Path) -> Iterator[str]:
    """Yield the /metrics URL of the ASGI app under uvicorn, with a seeded SQLite database and a cluster in Redis."""
    client = redis.Redis.from_url(redis_url)
    try:
        with uvicorn_server(state, redis_url, SEED_DATABASE, GPULSE_METRICS_TOKEN=TOKEN) as url:
            client.flushdb()
            write_cluster(client)
            yield url + "/metrics"
    finally:
        client.flushdb()
        client.close()


def series_of(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of an exposition, read with prometheus-client's parser."""
    series: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return series


def scrape(url: str, token: str | None = TOKEN) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


