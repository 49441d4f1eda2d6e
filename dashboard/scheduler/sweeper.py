"""The drain sweeper: every minute, queue again what a lost message left undone.

The evaluator queues each drain and resume look once, without retrying the
broker (a broker outage must not stall the ingest tick), and a scheduler
worker may be killed mid-call: a record could then stay pending, or a node
drained, for good. The scheduler worker's sweeper queues a drain for each
pending record nobody has touched for longer than any retry waits, and a
resume for each drained node whose resume is due. Both tasks claim their
records first, so a sweep that races a live task does nothing twice.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from dashboard.periodic import PeriodicPass
from dashboard.scheduler import tasks
from dashboard.scheduler.models import DrainRecord

log = logging.getLogger(__name__)

INTERVAL_S = 60


def idle_after() -> timedelta:
    """How long a record lies untouched when no task is coming for it: past the longest retry wait and call."""
    return timedelta(seconds=1.5 * tasks.MAX_BACKOFF + 2 * settings.GPULSE_SCONTROL_TIMEOUT + 60)


def sweep() -> tuple[int, int]:
    """Queue the forgotten drains and due resumes; return how many of each."""
    idle = timezone.now() - idle_after()
    pending = list(DrainRecord.objects.filter(state=DrainRecord.PENDING, updated__lt=idle).values_list("id", flat=True))
    for record_id in pending:
        tasks.drain.apply_async((record_id,))
    drained = DrainRecord.objects.filter(state=DrainRecord.DRAINED, updated__lt=idle).select_related("rule")
    by_node: dict[str, list[DrainRecord]] = {}
    for record in drained:
        by_node.setdefault(record.node, []).append(record)
    resumed = 0
    for node, records in by_node.items():
        due = tasks.resume_due(node, records)
        if due is not None and due <= timezone.now():
            tasks.schedule_resume(node)
            resumed += 1
    if pending or resumed:
        log.warning("drain sweeper: queued %d forgotten drain(s) and %d due resume(s)", len(pending), resumed)
    return len(pending), resumed


class Sweeper(PeriodicPass):
    def __init__(self, interval_s: float = INTERVAL_S):
        super().__init__("drain sweeper", sweep, interval_s)
