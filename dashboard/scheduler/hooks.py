"""The Slurm drain's hook on alert transitions (registered in apps.py, dashboard/alerts/hooks.py):
for rules with "drain", record and queue, never call scontrol.

Inside the transaction that records a firing, ``record_firings`` adds a
pending DrainRecord; once it commits, ``enqueue`` puts the drain (and, for a
resolution, a resume) on the scheduler queue. Nothing here waits on Slurm,
and a broker outage is logged, never raised into the ingest tick.
"""

import logging
from collections.abc import Callable

from django.conf import settings

from dashboard.alerts.hooks import Change
from dashboard.alerts.models import DEFAULT_RESUME_AFTER, Rule
from dashboard.scheduler.models import DrainRecord
from dashboard.scheduler.slurm import gpulse_reason
from dashboard.scheduler.tasks import drain, schedule_resume

log = logging.getLogger(__name__)

# Records whose drain is on its way or holds: a node with one needs no other.
OPEN = (DrainRecord.PENDING, DrainRecord.DRAINED)


def drain_or_resume(changes: list[Change]) -> Callable[[], None] | None:
    """Record a drain for each firing of a drain rule, and return what queues it and a resume look
    for each resolution once the transaction commits; the scheduler worker calls scontrol."""
    if not settings.GPULSE_SLURM_DRAIN:
        return None
    fired: list[Change] = []
    resumes: dict[str, float] = {}
    for change in changes:
        if change.fired:
            fired.append(change)
        elif change.resolved and (change.rule is None or change.rule.drain):
            # A rule that was disabled or deleted may have drained the node: look.
            resumes[change.node] = max(resumes.get(change.node, 0.0), resume_after(change.rule))
    drain_ids = record_firings(fired)
    if not (drain_ids or resumes):
        return None
    return lambda: enqueue(drain_ids, resumes)


def record_firings(fired: list[Change]) -> list[int]:
    """Create a pending drain record per node a drain rule fired on (of the alerts that ``fired``); return their ids.

    One record, so one scontrol call, per node: an Xid on 8 GPUs drains the node once, and a
    node that already has a pending or drained record gets none (its drain holds; the resume
    waits for every drain alert on the node, dashboard/scheduler/tasks.resume_due)."""
    first: dict[str, tuple[Change, Rule]] = {}
    for f in fired:
        if f.rule is not None and f.rule.drain:
            first.setdefault(f.node, (f, f.rule))
    held = set(DrainRecord.objects.filter(node__in=list(first), state__in=OPEN).values_list("node", flat=True))
    rows = [
        DrainRecord(
            node=f.node,
            rule=rule,
            rule_name=rule.name,
            alert_id=f.alert_id,
            reason=gpulse_reason(f"{rule.name}{'' if f.gpu is None else f' on GPU {f.gpu}'}: {f.reason}"),
        )
        for node, (f, rule) in first.items()
        if node not in held
    ]
    return [row.pk for row in DrainRecord.objects.bulk_create(rows)]


def resume_after(rule: Rule | None) -> float:
    return float(rule.resume_after) if rule is not None else float(DEFAULT_RESUME_AFTER)


def enqueue(drain_ids: list[int], resumes: dict[str, float]) -> None:
    """Queue a drain per record and a resume look per node (node → seconds to wait)."""
    for record_id in drain_ids:
        try:
            # retry=False: a broker outage must not stall the ingest tick.
            drain.apply_async((record_id,), retry=False)
        except Exception:
            log.exception("could not queue the drain of record %s", record_id)
    for node, wait in resumes.items():
        try:
            schedule_resume(node, wait, retry=False)
        except Exception:
            log.exception("could not queue the resume of %s", node)
