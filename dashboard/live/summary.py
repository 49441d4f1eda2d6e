"""Cluster-wide counters the overview header shows next to the GPU numbers."""

import logging

from dashboard.alerts.evaluate import firing_count
from dashboard.benchmarks.models import BenchmarkJob

log = logging.getLogger(__name__)


def cluster_summary() -> dict:
    """Return firing alerts and benchmark jobs by state; never raise into ingest."""
    try:
        jobs = BenchmarkJob.objects.active_counts()
        return {"alerts_firing": firing_count(), "jobs_running": jobs["running"], "jobs_queued": jobs["queued"]}
    except Exception as exc:  # a locked or unreachable database must not stop frames
        log.warning("cluster summary unavailable: %s", exc)
        return {}
