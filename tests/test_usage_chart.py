"""The usage page's chart ends at the newest bucket ingest has written all of: a partial one reads as a dip."""

import datetime as dt
import json
import re
import time

import pytest
from django.conf import settings

from dashboard.live.models import ClusterUsage

pytestmark = pytest.mark.django_db

GPUS = 8


def series(viewer, since: str) -> dict:
    html = viewer.get(f"/usage/?since={since}").content.decode()
    return json.loads(re.search(r'<script id="usage-series" type="application/json">(.*?)</script>', html, re.S)[1])


def test_the_usage_chart_leaves_out_the_minute_and_the_hour_not_yet_written_whole(viewer):
    """Issue 32: the newest bucket of the usage chart was partial and read as a dip: the hour in progress (ranges
    past two days chart hours), and the minute that had just ended, whose last part ingest writes up to
    GPULSE_USAGE_FLUSH_INTERVAL seconds later."""
    now = time.time()
    # Every minute of the last three hours had all 8 GPUs reporting, up to the minute in progress, as ingest
    # writes them: the newest ones only in part, were they not full here.
    first = int(now // 60 * 60) - 3 * 3600
    ClusterUsage.objects.bulk_create(
        ClusterUsage(minute=dt.datetime.fromtimestamp(minute, dt.UTC), samples=GPUS * 60, seconds=GPUS * 60.0,
                     allocated_seconds=GPUS * 60.0, busy_seconds=GPUS * 30.0, energy_j=0.0)
        for minute in range(first, int(now) + 1, 60)
    )
    written = now - settings.GPULSE_USAGE_FLUSH_INTERVAL - settings.GPULSE_TICK
    for since, step in (("2h", 60), ("3d", 3600)):
        chart = series(viewer, since)
        assert chart["resolution"] == step
        assert chart["ts"], chart
        assert chart["ts"][-1] + step <= written, (since, chart["ts"][-1], written)
        assert chart["ts"][-1] + 2 * step > written - 1, (since, "a whole bucket left out")
        assert chart["gpus"][1:] == [GPUS] * (len(chart["gpus"]) - 1), (since, chart["gpus"])  # no dip
