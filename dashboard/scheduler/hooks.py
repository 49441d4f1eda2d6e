"""What the alert evaluator does for rules with "drain": record and queue, never call scontrol.

Inside the transaction that records a firing, ``record_firings`` adds a
pending DrainRecord; once it commits, ``enqueue`` puts the drain (and, for a
resolution, a resume) on the scheduler queue. Nothing here waits on Slurm,
and a broker outage is logged, never raised into the ingest tick.
"""

import logging
from dataclasses import dataclass

from django.conf import settings

from dashboard.alerts.models import DEFAULT_RESUME_AFTER, Rule
from dashboard.scheduler.models import DrainRecord
from dashboard.scheduler.slurm import gpulse_reason

log = logging.getLogger(__name__)

# Records whose drain is on its way or holds: a node with one needs no other.
OPEN = (DrainRecord.PENDING, DrainRecord.DRAINED)


@dataclass(frozen=True)
class Fired:
    alert_id: int
    rule: Rule
    node: str
    gpu: int | None
    reason: str  # the transition's reason: the condition and the value


def enabled() -> bool:
    return settings.GPULSE_SLURM_DRAIN


def record_firings(fired: list[Fired]) -> list[int]:
    """Create a pending drain record per node a drain rule fired on; return their ids.

    One record, so one scontrol call, per node: an Xid on 8 GPUs drains the node once, and a
    node that already has a pending or drained record gets none (its drain holds; the resume
    waits for every drain alert on the node, dashboard/scheduler/tasks.resume_due)."""
    first: dict[str, Fired] = {}
    for f in fired:
        if f.rule.drain:
            first.setdefault(f.node, f)
    held = set(DrainRecord.objects.filter(node__in=list(first), state__in=OPEN).values_list("node", flat=True))
    rows = [
        DrainRecord(
            node=f.node,
            rule=f.rule,
            rule_name=f.rule.name,
            alert_id=f.alert_id,
            reason=gpulse_reason(f"{f.rule.name}{'' if f.gpu is None else f' on GPU {f.gpu}'}: {f.reason}"),
        )
        for node, f in first.items()
        if node not in held
    ]
    return [row.pk for row in DrainRecord.objects.bulk_create(rows)]


def resume_after(rule: Rule | None) -> float:
    return float(rule.resume_after) if rule is not None else float(DEFAULT_RESUME_AFTER)


def enqueue(drain_ids: list[int], resumes: dict[str, float]) -> None:
    """Queue a drain per record and a resume look per node (node → seconds to wait)."""
    from dashboard.scheduler.tasks import drain, schedule_resume

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
