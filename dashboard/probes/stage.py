"""Bandwidth probes as an ingest stage: each node's newest probe against its own median
(dashboard/probes/tracker.py), in the frames as ``probe``.

Offers ``board["probe_busbw"]`` (a function: node -> newest busbw, GB/s) to the stages after it.
"""

from django.conf import settings

from dashboard.live.stages import Stage
from dashboard.probes.tracker import ProbeTracker


class ProbeStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.tracker = ProbeTracker(core.redis, core.keys, settings.GPULSE_PROBE_LOW_FRACTION)
        core.board["probe_busbw"] = self.tracker.busbw

    def restore(self) -> None:
        self.tracker.seed(list(self.core.state.nodes))

    def follow(self, names: list[str]) -> None:
        self.tracker.follow(names)

    def tick(self, now, changed):
        nodes = self.core.state.nodes
        return [node for node in self.tracker.poll() if node in nodes]

    def node_fields(self, name: str) -> dict:
        probe = self.tracker.latest.get(name)
        return {} if probe is None else {"probe": probe}

    def forget(self, name: str, pipe) -> None:
        self.tracker.forget(name)
        pipe.delete(self.core.keys.probe_history(name), self.core.keys.probe_stream(name))

    def heartbeat(self, beat: dict) -> None:
        beat["forged"] += self.tracker.forged
