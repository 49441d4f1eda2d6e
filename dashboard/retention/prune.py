"""Rows past their retention, deleted in batches.

Each table that grows with time has a setting, in days (0: kept for ever), and a query for its rows
older than the cutoff. They go BATCH_ROWS at a time, each batch one short statement after a read of
its ids: SQLite has one writer, and ingest's rollup write waits for the lock, so no delete may hold it
long. Deleting is idempotent, so two workers pruning at once delete each row once between them.

What a page still shows is kept whatever its age: each alert's latest transition and latest
notifying one (the alerts and node pages read their reason and notice from them), the delivery
attempts and notification group those reference, and an open incident. Minute rollups go only
below the downsampling's watermark, so no minute is lost before its hour is computed.
"""

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet

from dashboard.accounts.models import AuditEvent
from dashboard.alerts.models import DeliveryAttempt, Notification, Transition
from dashboard.health.models import HealthChange
from dashboard.live.models import ClusterUsage, GpuRollup, GpuRollupHour, GpuUsage, UsageHour
from dashboard.reliability.models import Exposure, Incident
from dashboard.retention.downsample import downsampled_until

BATCH_ROWS = 5000
# A pause between two batches, so a writer waiting for SQLite's lock (ingest) takes it in between.
BATCH_PAUSE_S = 0.05


def delete_in_batches(rows: QuerySet) -> int:
    """Delete ``rows``, at most BATCH_ROWS per DELETE statement; return how many went."""
    model = rows.model
    deleted = 0
    while True:
        ids = list(rows.order_by().values_list("pk", flat=True)[:BATCH_ROWS])
        if ids:
            deleted += model.objects.filter(pk__in=ids).delete()[1].get(model._meta.label, 0)
        if len(ids) < BATCH_ROWS:
            return deleted
        time.sleep(BATCH_PAUSE_S)


def minutes_expire_before(cutoff: dt.datetime) -> dt.datetime | None:
    """Minute rollups go before the cutoff and below the downsampling's watermark (None: none may go yet)."""
    done = downsampled_until()
    return None if done is None else min(cutoff, done)


def _minutes(cutoff: dt.datetime) -> QuerySet:
    before = minutes_expire_before(cutoff)
    return GpuRollup.objects.none() if before is None else GpuRollup.objects.filter(minute__lt=before)


def _newer_transition(notifying: bool) -> Exists:
    """Whether the transition's alert has a later transition (a later notifying one where ``notifying``)."""
    later = Q(created__gt=OuterRef("created")) | Q(created=OuterRef("created"), id__gt=OuterRef("id"))
    newer = Transition.objects.filter(later, alert=OuterRef("alert"))
    return Exists(newer.filter(notify=True) if notifying else newer)


def _transitions(cutoff: dt.datetime) -> QuerySet:
    silent = Q(notify=False) & _newer_transition(notifying=False)
    # A notifying one waiting for dispatch (processed empty) is never pruned.
    notified = Q(notify=True, processed__isnull=False) & _newer_transition(notifying=True)
    return Transition.objects.filter(silent | notified, created__lt=cutoff)


def _delivery_attempts(cutoff: dt.datetime) -> QuerySet:
    shown = Transition.objects.filter(notification=OuterRef("notification"))
    return DeliveryAttempt.objects.filter(~Exists(shown), created__lt=cutoff)


def _notifications(cutoff: dt.datetime) -> QuerySet:
    referenced = (Exists(Transition.objects.filter(notification=OuterRef("pk")))
                  | Exists(DeliveryAttempt.objects.filter(notification=OuterRef("pk"))))
    return Notification.objects.filter(~referenced, processed__isnull=False, created__lt=cutoff)


def _incidents(cutoff: dt.datetime) -> QuerySet:
    # Imported incidents are a site's own record, not growth: kept.
    return Incident.objects.filter(source=Incident.WATCHED, end__isnull=False, end__lt=cutoff)


def _exposure(cutoff: dt.datetime) -> QuerySet:
    # The node-hours go with the incidents, or MTBF over "all" would count hours without their failures.
    # An hour is [start, end): one that ends at the cutoff is wholly before it, as an incident ending before it is.
    return Exposure.objects.filter(source=Incident.WATCHED, end__lte=cutoff)


@dataclass(frozen=True)
class Expiry:
    name: str  # what goes, for the log
    setting: str  # days kept; 0: kept for ever
    expired: Callable[[dt.datetime], QuerySet]  # the rows older than a cutoff that may go


# In this order: transitions before the attempts and groups they keep, incidents with their node-hours.
EXPIRIES = (
    Expiry("minute rollups", "GPULSE_RETAIN_MINUTES_DAYS", _minutes),
    Expiry("hourly rollups", "GPULSE_RETAIN_HOURS_DAYS", lambda cutoff: GpuRollupHour.objects.filter(hour__lt=cutoff)),
    Expiry("GPU usage minutes", "GPULSE_RETAIN_USAGE_MINUTES_DAYS",
           lambda cutoff: GpuUsage.objects.filter(minute__lt=cutoff)),
    Expiry("usage hours", "GPULSE_RETAIN_USAGE_DAYS", lambda cutoff: UsageHour.objects.filter(hour__lt=cutoff)),
    Expiry("cluster usage minutes", "GPULSE_RETAIN_USAGE_DAYS",
           lambda cutoff: ClusterUsage.objects.filter(minute__lt=cutoff)),
    Expiry("alert transitions", "GPULSE_RETAIN_ALERT_HISTORY_DAYS", _transitions),
    Expiry("delivery attempts", "GPULSE_RETAIN_DELIVERY_ATTEMPTS_DAYS", _delivery_attempts),
    Expiry("notification groups", "GPULSE_RETAIN_ALERT_HISTORY_DAYS", _notifications),
    Expiry("audit events", "GPULSE_RETAIN_AUDIT_DAYS", lambda cutoff: AuditEvent.objects.filter(created__lt=cutoff)),
    Expiry("health changes", "GPULSE_RETAIN_HEALTH_CHANGES_DAYS",
           lambda cutoff: HealthChange.objects.filter(at__lt=cutoff)),
    Expiry("incidents", "GPULSE_RETAIN_INCIDENTS_DAYS", _incidents),
    Expiry("node-hours watched", "GPULSE_RETAIN_INCIDENTS_DAYS", _exposure),
)


def prune(now: dt.datetime) -> dict[str, int]:
    """Delete what is past its retention at ``now``; return the rows deleted per kind, where any were."""
    deleted = {}
    for expiry in EXPIRIES:
        days = getattr(settings, expiry.setting)
        if days:
            count = delete_in_batches(expiry.expired(now - dt.timedelta(days=days)))
            if count:
                deleted[expiry.name] = count
    return deleted
