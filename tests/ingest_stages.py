"""The stages a test's own Ingest runs, and how a test reaches one.

STAGES is what ingest judges from the samples alone (health, probes, idle
allocations, kernels run with SMs idle, incidents) and the minute rollups: a test's frames carry no
alert flags and no database counters unless it asks for them with ``with_alerts``.
"""

from dashboard.activity.stage import SmIdleStage
from dashboard.alerts.stage import AlertStage
from dashboard.health.stage import HealthStage
from dashboard.live.ingest import Ingest
from dashboard.probes.stage import ProbeStage
from dashboard.reliability.stage import IncidentStage
from dashboard.rollups.stage import RollupStage
from dashboard.usage.stage import IdleStage

STAGES = [HealthStage, ProbeStage, IdleStage, SmIdleStage, IncidentStage, RollupStage]


def with_alerts(evaluator) -> list:
    """STAGES, and alert evaluation by ``evaluator`` where production runs it (before the incidents)."""
    return [HealthStage, ProbeStage, IdleStage, SmIdleStage, lambda core: AlertStage(core, evaluator), IncidentStage,
            RollupStage]


def stage_of(ingest: Ingest, kind: type):
    """The ingest's stage of this class."""
    return next(stage for stage in ingest.stages if isinstance(stage, kind))


def rollups_of(ingest: Ingest):
    """The ingest's minute rollups (its RollupStage's accumulator)."""
    return stage_of(ingest, RollupStage).accumulator
