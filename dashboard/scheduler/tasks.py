"""Scheduler-queue tasks: drain a node when a drain rule fires, resume it once the rule has stayed resolved.

They run on their own queue and worker (``celery -Q scheduler``): scontrol
may wait on a slurmctld that does not answer, and that must hold no ingest
tick, webhook or benchmark. Each task claims its records (compare-and-set on
``DrainRecord.claim``) before it calls scontrol, so a retried or duplicated
message drains nothing twice, and every outcome is a record state and an audit
row (committed together) and a log line; no task raises for a Slurm problem.

gpulse resumes only what it drained: a node with no ``drained`` record, or
whose Slurm reason no longer starts with "gpulse:" (a person drained it
again, with their own reason), is left as it is.
"""

import logging
import random
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from dashboard.accounts.audit import audit
from dashboard.alerts.models import DEFAULT_RESUME_AFTER, FIRING, Alert
from dashboard.celery_app import app
from dashboard.scheduler import limits, slurm
from dashboard.scheduler.models import DrainRecord
from gpulse.celery_contract import SCHEDULER_QUEUE

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
# Who the audit log says drained or resumed a node.
ACTOR = "gpulse"
# Longest countdown a resume task waits before it looks again: far below the
# broker's visibility timeout, so a long resume_after is never delivered twice.
MAX_WAIT = 300.0
# How the error of a drain held back by a rate limit begins (dashboard/scheduler/limits.py).
WAITING = "waiting"


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt number ``attempt`` (1-based)."""
    base = settings.GPULSE_DRAIN_RETRY_BASE
    return min(MAX_BACKOFF, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)


def _stale_claim() -> Q:
    """A free record, or one whose worker died holding it (its scontrol call would have timed out)."""
    cutoff = timezone.now() - timedelta(seconds=2 * settings.GPULSE_SCONTROL_TIMEOUT + 30)
    return Q(claim="") | Q(claimed_at__lt=cutoff)


@app.task(name="gpulse.scheduler.drain", queue=SCHEDULER_QUEUE, ignore_result=True)
def drain(record_id: int) -> str:
    """Claim a pending record and drain its node; queue another try on a temporary failure."""
    token = uuid.uuid4().hex
    claimed = DrainRecord.objects.filter(_stale_claim(), id=record_id, state=DrainRecord.PENDING).update(
        claim=token, claimed_at=timezone.now(), attempts=F("attempts") + 1
    )
    if not claimed:
        return "not pending"
    record = DrainRecord.objects.select_related("alert").get(id=record_id)
    if not _drain_alert_fires(record):
        _finish(record, DrainRecord.CANCELLED, "the alert resolved before the node was drained: nothing done")
        return record.state
    wait = limits.drain_wait(record, timezone.now())
    if wait is not None:
        return _drain_waits(record, wait)
    try:
        node = slurm.show_node(record.node)
        if node.drained and not node.drained_by_gpulse:
            _finish(record, DrainRecord.SKIPPED_BY_PERSON,
                    f"already drained outside gpulse, by a person or Slurm (Slurm reason {node.reason!r}): "
                    "gpulse left it as it was",
                    audited=("node.drain_skipped", {"slurm_reason": node.reason}))
            return record.state
        slurm.drain(record.node, record.reason)
    except slurm.SlurmError as exc:
        return _drain_failed(record, exc)
    _finish(record, DrainRecord.DRAINED, "", audited=("node.drain", {"reason": record.reason}),
            drained_at=timezone.now())
    log.info("drained %s in Slurm: %s", record.node, record.reason)
    return record.state


def _drain_alerts(node: str, alert_ids: list[int]) -> Q:
    """The alerts that keep ``node`` drained: those of its records, and any firing drain rule's on it
    (a node gets one record however many drain alerts fire on it: hooks.record_firings)."""
    return Q(id__in=alert_ids) | Q(rule__drain=True, rule__enabled=True, node=node)


def _drain_alert_fires(record: DrainRecord) -> bool:
    ids = [] if record.alert_id is None else [record.alert_id]
    return Alert.objects.filter(_drain_alerts(record.node, ids), status=FIRING).exists()


def _drain_waits(record: DrainRecord, wait: limits.Wait) -> str:
    """Keep the record pending, not counting an attempt, and look again when the limit allows."""
    message = f"{WAITING} {wait.seconds:.0f} s: {wait.why}"
    # One audit row per record, however many times it looks again.
    audited = None if record.error.startswith(WAITING) else ("node.drain_waiting", {"why": wait.why})
    _finish(record, DrainRecord.PENDING, message, audited=audited, attempts=record.attempts - 1)
    log.warning("drain of %s: %s", record.node, message)
    drain.apply_async((record.pk,), countdown=min(wait.seconds, MAX_WAIT))
    return "waiting"


def _drain_failed(record: DrainRecord, exc: slurm.SlurmError) -> str:
    if exc.permanent or record.attempts >= settings.GPULSE_DRAIN_MAX_ATTEMPTS:
        message = f"not drained after {record.attempts} attempt(s): {exc.message}"
        _finish(record, DrainRecord.FAILED, message, audited=("node.drain_failed", {"error": message}))
        log.error("could not drain %s: %s", record.node, message)
        return record.state
    wait = backoff(record.attempts)
    message = f"attempt {record.attempts} failed, trying again in {wait:.0f} s: {exc.message}"
    _finish(record, DrainRecord.PENDING, message)
    log.warning("drain of %s: %s", record.node, message)
    drain.apply_async((record.pk,), countdown=wait)
    return "retry"


def _finish(record: DrainRecord, state: str, error: str, audited: tuple[str, dict] | None = None,
            **fields) -> None:
    """Set the record's outcome and let go of its claim; write the outcome's audit row (action, detail),
    if any, in the same transaction, so no reader sees the one without the other."""
    fields.update(state=state, error=error[:500], claim="", claimed_at=None)
    with transaction.atomic():
        DrainRecord.objects.filter(id=record.pk, claim=record.claim).update(updated=timezone.now(), **fields)
        if audited is not None:
            action, detail = audited
            audit(None, action, record.node, actor=ACTOR, rule=record.rule_name, record=record.pk, **detail)
    for name, value in fields.items():
        setattr(record, name, value)


def schedule_resume(node: str, countdown: float = 0.0, number: int = 1, **options) -> None:
    """Queue a resume look at ``node`` in ``countdown`` seconds (at most MAX_WAIT: it looks again if early)."""
    resume.apply_async((node, number), countdown=max(0.0, min(countdown, MAX_WAIT)), **options)


def resume_due(node: str, records: list[DrainRecord]) -> datetime | None:
    """Return when the node may be resumed, or None while a drain rule still fires on it."""
    alerts = _drain_alerts(node, [r.alert_id for r in records if r.alert_id is not None])
    if Alert.objects.filter(alerts, status=FIRING).exists():
        return None
    last = Alert.objects.filter(alerts).aggregate(resolved=Max("resolved_at"), wait=Max("rule__resume_after"))
    since = max(filter(None, [last["resolved"], *(r.drained_at for r in records)]))
    # The longest resume_after of the node's drain rules, those that fired on it without a record of their own too.
    wait = max(last["wait"] or 0, *(r.rule.resume_after if r.rule else DEFAULT_RESUME_AFTER for r in records))
    return since + timedelta(seconds=wait)


@app.task(name="gpulse.scheduler.resume", queue=SCHEDULER_QUEUE, ignore_result=True)
def resume(node: str, number: int = 1) -> str:
    """Resume ``node`` once every drain alert on it has stayed resolved for its rule's resume_after.

    Looks again later while it is not yet due; does nothing while a drain
    rule still fires (that alert's resolution queues the next look).
    """
    records = list(DrainRecord.objects.select_related("rule").filter(node=node, state=DrainRecord.DRAINED))
    if not records:
        return "nothing drained"
    due = resume_due(node, records)
    if due is None:
        return "still firing"
    left = (due - timezone.now()).total_seconds()
    if left > 0:
        schedule_resume(node, left, number)
        return "waiting"
    token = uuid.uuid4().hex
    ids = [r.pk for r in records]
    claimed = DrainRecord.objects.filter(_stale_claim(), id__in=ids, state=DrainRecord.DRAINED).update(
        claim=token, claimed_at=timezone.now()
    )
    if not claimed:
        return "claimed elsewhere"
    records = list(DrainRecord.objects.filter(claim=token))
    try:
        state = slurm.show_node(node)
        if not state.drained_by_gpulse:
            return _hands_off(records, state)
        slurm.resume(node)
    except slurm.SlurmError as exc:
        return _resume_failed(node, records, exc, number)
    now = timezone.now()
    for record in records:
        _finish(record, DrainRecord.RESUMED, "", audited=("node.resume", {}), resumed_at=now)
    log.info("resumed %s in Slurm: its drain alerts stayed resolved", node)
    return DrainRecord.RESUMED


def _hands_off(records: list[DrainRecord], state: slurm.NodeState) -> str:
    if state.drained:
        message = f"a person drained it again (Slurm reason {state.reason!r}): gpulse leaves it drained"
    else:
        message = f"a person already resumed it (Slurm state {state.state}): nothing for gpulse to do"
    for record in records:
        _finish(record, DrainRecord.SKIPPED_BY_PERSON, message,
                audited=("node.resume_skipped", {"slurm_state": state.state, "slurm_reason": state.reason}))
    log.info("not resuming %s: %s", state.name, message)
    return DrainRecord.SKIPPED_BY_PERSON


def _resume_failed(node: str, records: list[DrainRecord], exc: slurm.SlurmError, number: int) -> str:
    if exc.permanent or number >= settings.GPULSE_DRAIN_MAX_ATTEMPTS:
        message = (f"not resumed after {number} attempt(s): {exc.message}; the node stays drained until "
                   f"someone runs: scontrol update NodeName={node} State=RESUME")
        for record in records:
            _finish(record, DrainRecord.FAILED, message, audited=("node.resume_failed", {"error": message}))
        log.error("could not resume %s: %s", node, exc.message)
        return DrainRecord.FAILED
    wait = backoff(number)
    message = f"resume attempt {number} failed, trying again in {wait:.0f} s: {exc.message}"
    for record in records:
        _finish(record, DrainRecord.DRAINED, message)
    log.warning("resume of %s: %s", node, message)
    schedule_resume(node, wait, number + 1)
    return "retry"
