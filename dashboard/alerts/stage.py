"""Alert evaluation as an ingest stage (dashboard/alerts/evaluate.py).

Rules are evaluated in the database work after the frame, against the
cluster state, the probes' busbw (``board["probe_busbw"]``) and the nodes'
health (``board["health"]``), where those stages run. The GPUs with a firing
alert get FLAG_ALERT in the next frame (one tick late is still on time: at
8,000 GPUs an evaluation costs tens of ms that would delay every frame), and
the summary carries how many alerts fire.
"""

from dashboard.alerts.evaluate import AlertEvaluator, firing_count
from dashboard.live.frames import FLAG_ALERT
from dashboard.live.stages import Stage


class AlertStage(Stage):
    def __init__(self, core, evaluator: AlertEvaluator | None = None):
        super().__init__(core)
        self.evaluator = evaluator or AlertEvaluator()
        self.latest: dict = {}

    def gpu_flags(self) -> dict[str, dict[int, int]]:
        flags: dict[str, dict[int, int]] = {}
        for node, gpu in self.evaluator.firing_targets():
            if gpu is not None:
                flags.setdefault(node, {})[gpu] = FLAG_ALERT
        return flags

    def summary(self) -> dict:
        return self.latest

    def write_database(self, now: float) -> None:
        busbw = self.core.board.get("probe_busbw")
        self.evaluator.evaluate(self.core.state, now, probes=busbw() if busbw else None,
                                health=self.core.board.get("health"))
        self.latest = {"alerts_firing": firing_count()}

    def heartbeat(self, beat: dict) -> None:
        beat["alerts"] = self.evaluator.status()
