"""The retention pass: downsample, keep the partitions (PostgreSQL), then prune.

A Celery task (tasks.py) that `celery beat` sends every GPULSE_RETENTION_INTERVAL seconds, not a
PeriodicPass thread in each control worker: a pass can take minutes (the first one downsamples every
hour since the oldest minute, a large cluster deletes millions of rows), and once an interval across the
cluster is enough, where a thread in each of N control workers would do the same work N times. Each step
is still safe when two workers run it at once (a message delivered twice, a pass that outlasts its
interval): the downsampling by upserts and a watermark that only moves forward, the partitions under an
advisory lock, the pruning by deletes that find nothing left to delete.
"""

import datetime as dt
import logging

from django.utils import timezone

from dashboard.retention.downsample import downsample
from dashboard.retention.partitions import upkeep
from dashboard.retention.prune import prune

log = logging.getLogger(__name__)


def run_retention(now: dt.datetime | None = None) -> dict[str, int]:
    """One pass at ``now`` (default: the clock); return the hourly rows written and the rows pruned per kind."""
    now = now or timezone.now()
    done = {"hourly rows written": downsample(now), **upkeep(now), **prune(now)}
    log.info("retention: %s", ", ".join(f"{name} {count}" for name, count in done.items()))
    return done

