"""Incidents as an ingest stage (dashboard/reliability/tracker.py): after the health stage, whose
verdicts it reads from ``board["health"]``, and after the alerts stage in the database work (what pages a
person goes first)."""

from dashboard.live.stages import Stage
from dashboard.reliability.tracker import IncidentTracker


class IncidentStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.tracker = IncidentTracker()

    def tick(self, now, changed):
        # Without the health stage, incidents open for down nodes only.
        self.tracker.observe(now, changed, self.core.state.nodes, self.core.board.get("health", {}))
        return ()

    def write_database(self, now: float) -> None:
        self.tracker.write(now)
