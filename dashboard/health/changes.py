"""Verdict changes waiting for the database: written by ingest's database stage, kept through an outage.

Like the rollups (dashboard/rollups/accumulator.py), a failed write changes nothing in
memory: the rows wait and go with the next write. They are bounded: past
``max_rows`` the oldest are dropped, logged and counted in ``lost``.
"""

import datetime as dt
import logging

from django.db import transaction

from dashboard.health.models import HealthChange as HealthChangeRow
from dashboard.health.node_health import HealthChange

log = logging.getLogger("gpulse.ingest")

REASON_LENGTH = HealthChangeRow._meta.get_field("reason").max_length


class HealthChangeQueue:
    def __init__(self, max_rows: int = 100_000):
        self.max_rows = max_rows
        self.pending: list[HealthChange] = []
        self.lost = 0

    def add(self, changes: list[HealthChange]) -> None:
        self.pending += changes
        excess = len(self.pending) - self.max_rows
        if excess > 0:
            del self.pending[:excess]
            self.lost += excess
            log.error("health: dropped %d verdict changes: more than %d wait for the database", excess, self.max_rows)

    def write(self) -> int:
        """Write every waiting change in one transaction; return how many. On a database error they stay."""
        if not self.pending:
            return 0
        rows = [
            HealthChangeRow(node=change.node, at=dt.datetime.fromtimestamp(change.at, dt.UTC), old=change.old,
                            new=change.new, reason=change.reason[:REASON_LENGTH])
            for change in self.pending
        ]
        with transaction.atomic():
            HealthChangeRow.objects.bulk_create(rows)
        del self.pending[:len(rows)]
        return len(rows)
