"""The fabric diagnostics as an ingest stage: what finished sweeps say of each node, for node health.

Every READ_EVERY seconds, in the database stage, it reads the sweeps that
succeeded since its last read (all of them, up to MAX_SWEEPS, at start-up, so
a finding survives a restart) and offers ``board["diagnostics"]``: node ->
its fabric findings, an empty dict for a node that passed. The health stage
judges them with the node's own findings at its next tick
(dashboard/health/node_health.py). A new dict is offered on each change, so
the health stage notices by identity.
"""

import datetime as dt
import logging
import time

from dashboard.benchmarks.diagnostics import NodeDiagnosis, apply, diagnose
from dashboard.benchmarks.models import FabricSweep
from dashboard.live.stages import Stage
from gpulse.job_status import JobStatus

READ_EVERY = 10.0
MAX_SWEEPS = 500
# A sweep's row is updated before its transaction commits: read a little before the last read,
# so one that committed late is not missed (the ones already taken are skipped).
OVERLAP = dt.timedelta(minutes=5)

log = logging.getLogger("gpulse.ingest")


class FabricDiagnosticsStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.book: dict[str, NodeDiagnosis] = {}
        self.taken: set[int] = set()
        self.since: dt.datetime | None = None
        self.read_at = -READ_EVERY  # time.monotonic()
        core.board["diagnostics"] = {}

    def write_database(self, now: float) -> None:
        if time.monotonic() - self.read_at < READ_EVERY:
            return
        sweeps = FabricSweep.objects.filter(status=JobStatus.SUCCEEDED, finished__isnull=False)
        if self.since is None:
            sweeps = sweeps.order_by("-finished")[:MAX_SWEEPS]
        else:
            sweeps = sweeps.filter(finished__gte=self.since - OVERLAP).exclude(id__in=self.taken)
        read_from = dt.datetime.now(dt.UTC)
        changed = set()
        for sweep in sweeps.only("id", "kind", "result", "flag_fraction", "finished"):
            self.taken.add(sweep.id)
            try:
                diagnosed = diagnose(sweep.id, sweep.kind, sweep.result, sweep.flag_fraction)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # Only sweeps.py writes a result, but the row can be edited: one that is not the shape
                # it writes is skipped, once, and the others still count.
                log.warning("fabric sweep %s: its result is not one a sweep writes, skipped: %r", sweep.id, exc)
                continue
            changed |= apply(self.book, sweep.finished.timestamp(), diagnosed)
        self.since, self.read_at = read_from, time.monotonic()
        if changed:
            self.core.board["diagnostics"] = {node: held.findings for node, held in self.book.items()}
