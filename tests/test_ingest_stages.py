"""Ingest's stages (dashboard/live/stages.py): each one can be left out, and one that fails stops no other."""

import time

import orjson
import pytest
from django.core.exceptions import ImproperlyConfigured

from collectors.probe import publish_probe
from dashboard.activity.stage import SmIdleStage
from dashboard.alerts.stage import AlertStage
from dashboard.benchmarks.diagnostics_stage import FabricDiagnosticsStage
from dashboard.benchmarks.stage import BenchmarkSummaryStage
from dashboard.health.stage import HealthStage
from dashboard.live.models import GpuRollup
from dashboard.live.stages import Stage
from dashboard.longterm.stage import RemoteWriteStage
from dashboard.probes.stage import ProbeStage
from dashboard.reliability.stage import IncidentStage
from dashboard.rollups.stage import RollupStage
from dashboard.usage.stage import IdleStage
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from tests.samples import sample
from tests.test_ingest import frames, make_ingest, probe, xadd  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def one_tick(redis_client, ingest, node="n1"):
    xadd(redis_client, schema.encode(sample(node, gpus=2)))
    ingest.read(block_ms=10)
    ingest.emit(time.time())


def test_the_settings_name_every_stage_in_the_order_they_run(redis_client, make_ingest):  # noqa: F811
    ingest = make_ingest(stages=None)
    assert [type(stage) for stage in ingest.stages] == [
        HealthStage, ProbeStage, IdleStage, SmIdleStage, AlertStage, IncidentStage, BenchmarkSummaryStage,
        FabricDiagnosticsStage, RemoteWriteStage, RollupStage]


def test_with_no_stage_at_all_the_core_still_frames_acknowledges_and_beats(redis_client, make_ingest, frames):  # noqa: F811
    ingest = make_ingest(stages=[])
    publish_probe(redis_client, Keys(), probe("n1", 100.0))
    one_tick(redis_client, ingest)
    node = frames[-1]["nodes"]["n1"]
    assert node["status"] == "up" and len(node["gpus"]) == 2
    assert "health" not in node and "probe" not in node and frames[-1]["summary"] == {}
    # Nothing holds what the entry fed: it is acknowledged with the tick, and no minute is rolled up.
    assert redis_client.xpending(Keys().telemetry_stream("n1"), INGEST_GROUP)["pending"] == 0
    assert not GpuRollup.objects.exists()
    beat = orjson.loads(redis_client.get(Keys().ingest_heartbeat))
    assert beat["processed"] == 1 and "alerts" not in beat and "health" not in beat


def test_leaving_out_the_health_stage_leaves_probes_and_incidents_working(redis_client, make_ingest, frames):  # noqa: F811
    ingest = make_ingest(stages=[ProbeStage, IncidentStage])
    publish_probe(redis_client, Keys(), probe("n1", 100.0))
    one_tick(redis_client, ingest)
    node = frames[-1]["nodes"]["n1"]
    assert node["probe"]["busbw"] == 100.0 and "health" not in node
    assert redis_client.hgetall(Keys().health) == {}


def test_the_stages_run_in_the_settings_order_and_see_what_earlier_ones_offer(redis_client, make_ingest, settings):  # noqa: F811
    settings.GPULSE_INGEST_STAGES = ["dashboard.health.stage.HealthStage", "tests.test_ingest_stages.Recording"]
    ingest = make_ingest(stages=None)
    one_tick(redis_client, ingest)
    recording = ingest.stages[1]
    # The health stage judged n1 first (its verdict changed), and offers the verdicts on the board.
    assert recording.seen_changed == [["n1"]] and "n1" in recording.core.board["health"]


class Recording(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.seen_changed = []

    def tick(self, now, changed):
        self.seen_changed.append(list(changed))
        return ()


class Failing(Stage):
    def write_database(self, now):
        raise RuntimeError("a stage's bug")


class Counting(Stage):
    writes = 0

    def write_database(self, now):
        self.writes += 1


def test_a_stage_that_raises_stops_neither_the_next_stage_nor_the_rollups(redis_client, make_ingest, caplog):  # noqa: F811
    ingest = make_ingest(stages=[Failing, Counting, RollupStage])
    one_tick(redis_client, ingest)
    assert ingest.stage_failures == 1 and ingest.stages[1].writes == 1
    assert "Failing's database work failed; retrying next tick" in caplog.text
    assert GpuRollup.objects.filter(node="n1").count() == 2  # the first flush is due at once
    assert ingest.database.describe() is None  # not a database outage


def test_a_stage_the_settings_name_that_does_not_exist_is_refused_with_its_name(make_ingest, settings):  # noqa: F811
    settings.GPULSE_INGEST_STAGES = ["dashboard.health.stage.HealthStage", "dashboard.health.stage.Nope"]
    with pytest.raises(ImproperlyConfigured, match="GPULSE_INGEST_STAGES names 'dashboard.health.stage.Nope'"):
        make_ingest(stages=None)
