"""The node history past the database (dashboard/longterm/reading.py): a range older than the local retention is
read from a real VictoriaMetrics that remote write filled, merged with the database's rows, and the answer says
so; a store that is down or a URL it cannot use leaves the database's rows and says why."""

import datetime as dt
import time

import pytest
from django.test import override_settings

from dashboard.live.models import GpuRollupHour
from dashboard.longterm.reading import MAX_POINTS, bucket_range
from dashboard.longterm.store import parse_store_url
from dashboard.longterm.writer import RemoteWriter
from devtools.redis_server import free_port
from gpulse.keys import Keys
from tests.samples import sample
from tests.victoria_metrics import needs_victoria_metrics, victoria_metrics  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

HOUR = 3600
NODE = "hist-1"
# Readings every 15 min of each hour the store holds: util (%), temp (°C).
QUARTERS = [(10, 40), (20, 42), (30, 44), (40, 46)]


def at_hour(days_ago: float) -> int:
    return int((time.time() - days_ago * 86400) // HOUR * HOUR)


def drained(writer: RemoteWriter) -> None:
    deadline = time.monotonic() + 60
    while writer.rounds or writer.stats()["buffered_samples"]:
        assert time.monotonic() < deadline, writer.stats()
        time.sleep(0.02)


@pytest.fixture(scope="module")
def store_hours(victoria_metrics):  # noqa: F811
    """Three hours of NODE's two GPUs, five days ago, written to the store by remote write."""
    first = at_hour(5)
    writer = RemoteWriter(parse_store_url(victoria_metrics.write_url, "url"), headers={}, timeout=5,
                          max_samples=100_000)
    try:
        for hour in range(3):
            for quarter, (util, temp) in enumerate(QUARTERS):
                at = first + hour * HOUR + quarter * 900
                gpus = sample(NODE, gpus=2, util=util + hour, temp=temp)["gpus"]
                writer.offer(at * 1000, [{"node": NODE, "status": "up", "ts": at, "gpus": gpus,
                                          "twin_collectors": None}])
                drained(writer)  # rounds offered faster than ingest would are not skipped
    finally:
        writer.stop()
    assert writer.stats()["failed"] == writer.stats()["skipped_rounds"] == 0
    victoria_metrics.flush()
    return first


@pytest.fixture
def known_node(redis_client):
    redis_client.hset(Keys().known_nodes, NODE, f'{{"ts": {time.time() - 600}, "interval": 1.0}}')


def history(client, since: float, until: float | None = None) -> dict:
    query = f"since={since}" + (f"&until={until}" if until is not None else "")
    response = client.get(f"/api/v1/nodes/{NODE}?{query}")
    assert response.status_code == 200, response.content
    return response.json()["history"]


@needs_victoria_metrics
def test_a_range_older_than_the_database_keeps_is_read_from_the_store(client, viewer_user, known_node, store_hours,
                                                                       victoria_metrics):  # noqa: F811
    local_hour = at_hour(0.5)
    GpuRollupHour.objects.create(node=NODE, gpu=0, hour=dt.datetime.fromtimestamp(local_hour, dt.UTC), samples=60,
                                 util_min=1, util_mean=2, util_max=3, util_sum=120, util_count=60,
                                 temp_min=30, temp_mean=31, temp_max=32, temp_sum=1860, temp_count=60)
    client.force_login(viewer_user)
    with override_settings(GPULSE_HISTORY_PROMQL_URL=victoria_metrics.base, GPULSE_RETAIN_HOURS_DAYS=2,
                           GPULSE_RETAIN_MINUTES_DAYS=1):
        found = history(client, store_hours - HOUR)
    assert found["resolution"] == HOUR and found["source"] == "store+database"
    assert found["store"]["error"] is None and found["store"]["points"] == 2 * 3
    gpu0, gpu1 = found["gpus"]
    hours = [store_hours + n * HOUR for n in range(3)]
    assert gpu0["ts"] == [*hours, local_hour] and gpu1["ts"] == hours
    # Each hour as its rollup would be: min, mean and max of the hour's readings, in the rollups' units (%).
    assert gpu0["util"] == [[10 + n, 25 + n, 40 + n] for n in range(3)] + [[1, 2, 3]]
    assert gpu0["temp"] == [[40, 43, 46]] * 3 + [[30, 31, 32]]
    assert gpu1["power"] == [[400, 400, 400]] * 3
    assert gpu1["mem_used"] == [[40 * 1024**3] * 3] * 3
    # Within the database's retention, the store is not asked.
    with override_settings(GPULSE_HISTORY_PROMQL_URL=victoria_metrics.base, GPULSE_RETAIN_HOURS_DAYS=30,
                           GPULSE_RETAIN_MINUTES_DAYS=1):
        local = history(client, store_hours - HOUR)
    assert local["source"] == "database" and local["store"] is None and len(local["gpus"]) == 1


def test_a_store_that_is_down_leaves_the_database_rows_and_says_why(client, viewer_user, known_node):
    local_hour = at_hour(0.5)
    GpuRollupHour.objects.create(node=NODE, gpu=0, hour=dt.datetime.fromtimestamp(local_hour, dt.UTC), samples=60,
                                 util_min=1, util_mean=2, util_max=3, util_sum=120, util_count=60)
    client.force_login(viewer_user)
    with override_settings(GPULSE_HISTORY_PROMQL_URL=f"http://127.0.0.1:{free_port()}", GPULSE_RETAIN_HOURS_DAYS=2):
        found = history(client, at_hour(10))
    assert found["source"] == "database" and found["gpus"][0]["ts"] == [local_hour]
    assert found["store"]["error"].startswith("the long-term store could not be read: unreachable")
    assert "showing the database's rows only" in found["store"]["error"]
    with override_settings(GPULSE_HISTORY_PROMQL_URL="file:///etc/passwd", GPULSE_RETAIN_HOURS_DAYS=2):
        found = history(client, at_hour(10))
    assert "GPULSE_HISTORY_PROMQL_URL must be an http or https URL" in found["store"]["error"]
    assert found["gpus"][0]["util"] == [[1, 2, 3]]


def test_a_range_longer_than_a_query_may_answer_keeps_its_newest_buckets():
    first, last, truncated = bucket_range(0.0, 2 * 365 * 86400.0, HOUR)
    assert truncated and (last - first) // HOUR + 1 == MAX_POINTS and last == 2 * 365 * 86400 - HOUR
    assert bucket_range(10.0, 3 * HOUR + 1.0, HOUR) == (HOUR, 3 * HOUR, False)
