"""The retention pass: downsample, then prune, every GPULSE_RETENTION_INTERVAL seconds in each control worker.

A PeriodicPass (dashboard/periodic.py says why not Celery beat): both steps are safe to run in several
workers at once, the downsampling by upserts and a watermark that only moves forward, the pruning by
deletes that find nothing left to delete.
"""

import datetime as dt
import logging

from django.conf import settings
from django.utils import timezone

from dashboard.periodic import PeriodicPass
from dashboard.retention.downsample import downsample
from dashboard.retention.prune import prune

log = logging.getLogger(__name__)


def run_retention(now: dt.datetime | None = None) -> dict[str, int]:
    """One pass at ``now`` (default: the clock); return the hourly rows written and the rows pruned per kind."""
    now = now or timezone.now()
    done = {"hourly rows written": downsample(now), **prune(now)}
    log.info("retention: %s", ", ".join(f"{name} {count}" for name, count in done.items()))
    return done


class RetentionPass(PeriodicPass):
    def __init__(self, interval_s: float | None = None):
        super().__init__("retention", run_retention, interval_s or settings.GPULSE_RETENTION_INTERVAL)
