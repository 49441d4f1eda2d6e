"""Incidents from ingest: opened by a failing check or a long down, closed once healthy, one per flap,
carried over a restart, written through a database outage."""

import datetime as dt
import itertools

import pytest
from django.db import connection

from dashboard.live.ingest import Ingest
from dashboard.reliability.models import Exposure, Incident, MaintenanceWindow
from dashboard.reliability.stage import IncidentStage
from dashboard.reliability.tracker import EXPOSURE_FLUSH_EVERY, HEALED_AFTER
from gpulse import health
from tests.clock import Clock
from tests.ingest_stages import STAGES, stage_of
from tests.test_node_health import NVLINK_DOWN, finding, with_health

pytestmark = pytest.mark.django_db

START = 1_800_000_000.0
ENTRY_SEQ = itertools.count()
PCIE_NARROW = finding("pcie_link", health.FAIL, "x8 of x16", gpu=1)
OFF_THE_BUS = finding("gpu_count", health.FAIL, "GPU 3 missing: 7 of 8 on the bus")


@pytest.fixture
def clock():
    return Clock(START)


def make_ingest(redis_client, clock):
    return Ingest(redis_client, lambda frame: True, clock=clock, stages=STAGES)


@pytest.fixture
def ingest(redis_client, clock):
    return make_ingest(redis_client, clock)


def run(ingest, clock, seconds: float, *readings) -> None:
    """``seconds`` one-second ticks, each node sending its reading every tick."""
    for _ in range(int(seconds)):
        for reading in readings:
            reading = {**reading, "ts": clock.now}
            ingest.apply(reading, f"{int(clock.now * 1000)}-{next(ENTRY_SEQ)}".encode())
        ingest.emit(clock.now)
        clock.now += 1


def test_a_failing_check_opens_an_incident_with_its_component_and_healthy_again_closes_it(ingest, clock):
    run(ingest, clock, 3, with_health("n1"), with_health("n2"))
    failed_at = clock.now
    run(ingest, clock, 5, with_health("n1", PCIE_NARROW), with_health("n2"))
    [incident] = Incident.objects.all()
    assert (incident.node, incident.component, incident.gpu, incident.planned) == ("n1", "pcie", 1, False)
    assert incident.cause == "GPU 1 PCIe link: x8 of x16"
    assert incident.start.timestamp() == failed_at and incident.end is None

    healthy_at = clock.now
    run(ingest, clock, HEALED_AFTER + 2, with_health("n1"), with_health("n2"))
    incident.refresh_from_db()
    # The end is when it became healthy, not when the healthy stretch was long enough to believe.
    assert incident.end.timestamp() == healthy_at


@pytest.mark.parametrize(("found", "component"), [
    (NVLINK_DOWN, "nvlink"),
    (OFF_THE_BUS, "gpu"),
    (finding("xid", health.FAIL, "Xid 48 (memory): Double Bit ECC Error. Drain the node", gpu=0), "gpu_memory"),
    (finding("xid", health.FAIL, "Xid 79 (bus): GPU has fallen off the bus. Drain", gpu=2), "gpu"),
    (finding("ib_port", health.FAIL, "mlx5_0 port 1 DOWN"), "network"),
    (finding("row_remap", health.FAIL, "remapping failed", gpu=0), "gpu_memory"),
])
def test_the_component_is_the_failed_checks(ingest, clock, found, component):
    run(ingest, clock, 3, with_health("n1", found))
    assert Incident.objects.get().component == component


def test_a_warning_opens_no_incident(ingest, clock):
    run(ingest, clock, 5, with_health("n1", finding("clocks", health.WARN, "thermal slowdown while busy", gpu=0)))
    assert not Incident.objects.exists()


def test_a_node_down_longer_than_the_minimum_opens_a_node_down_incident(redis_client, clock, settings):
    settings.GPULSE_INCIDENT_MIN_DOWN = 30.0
    ingest = make_ingest(redis_client, clock)
    run(ingest, clock, 3, with_health("n1"), with_health("n2"))
    last_sample = clock.now - 1
    run(ingest, clock, 20, with_health("n2"))  # n1 silent: down after ~3 s, not yet 30 s
    assert not Incident.objects.exists()
    run(ingest, clock, 15, with_health("n2"))
    [incident] = Incident.objects.all()
    assert (incident.node, incident.component, incident.cause) == ("n1", "node_down",
                                                                    "node down: no sample for more than 30 s")
    assert incident.start.timestamp() == pytest.approx(last_sample, abs=0.01)


def test_a_short_down_opens_nothing(ingest, clock):
    run(ingest, clock, 3, with_health("n1"), with_health("n2"))
    run(ingest, clock, 30, with_health("n2"))
    run(ingest, clock, 3, with_health("n1"), with_health("n2"))
    assert not Incident.objects.exists()


def test_a_flapping_node_opens_one_incident(ingest, clock):
    run(ingest, clock, 2, with_health("n1"))
    for _ in range(5):  # failing 5 s, healthy 20 s: shorter than HEALED_AFTER
        run(ingest, clock, 5, with_health("n1", PCIE_NARROW))
        run(ingest, clock, 20, with_health("n1"))
    assert Incident.objects.count() == 1
    run(ingest, clock, HEALED_AFTER + 2, with_health("n1"))
    assert Incident.objects.get().end is not None
    # After it closed, a new failure is a new incident.
    run(ingest, clock, 2, with_health("n1", PCIE_NARROW))
    assert Incident.objects.count() == 2


def test_a_restarted_ingest_carries_on_the_open_incident(redis_client, clock):
    first = make_ingest(redis_client, clock)
    run(first, clock, 3, with_health("n1", NVLINK_DOWN))
    assert Incident.objects.filter(end=None).count() == 1
    second = make_ingest(redis_client, clock)  # a new process: its memory starts empty
    second.load_known_nodes()
    run(second, clock, 3, with_health("n1", NVLINK_DOWN))
    assert Incident.objects.count() == 1
    run(second, clock, HEALED_AFTER + 2, with_health("n1"))
    assert Incident.objects.get().end is not None


def test_an_incident_in_a_maintenance_window_is_planned(ingest, clock):
    at = dt.datetime.fromtimestamp(START, dt.UTC)
    MaintenanceWindow.objects.create(node="", start=at, end=at + dt.timedelta(hours=1), note="firmware")
    run(ingest, clock, 3, with_health("n1", NVLINK_DOWN))
    incident = Incident.objects.get()
    assert incident.planned is True and incident.planned_by.startswith("maintenance window: all nodes ")


@pytest.mark.django_db(transaction=True)
def test_the_incidents_of_a_database_outage_are_written_once_it_is_back(ingest, clock):
    run(ingest, clock, 2, with_health("n1"))
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE reliability_incident RENAME TO reliability_incident_away")
    try:
        run(ingest, clock, 3, with_health("n1", NVLINK_DOWN))
        run(ingest, clock, HEALED_AFTER + 2, with_health("n1"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE reliability_incident_away RENAME TO reliability_incident")
    assert not Incident.objects.exists()
    clock.now += 120  # past the outage's backoff
    run(ingest, clock, 2, with_health("n1"))
    [incident] = Incident.objects.all()
    assert incident.component == "nvlink" and incident.end is not None


def test_the_node_hours_watched_are_counted(ingest, clock):
    run(ingest, clock, 2, with_health("n1"), with_health("n2"))
    run(ingest, clock, 100, with_health("n1"), with_health("n2"))
    stage_of(ingest, IncidentStage).tracker.write(clock.now + EXPOSURE_FLUSH_EVERY)  # what the next flush would write
    assert sum(Exposure.objects.values_list("node_hours", flat=True)) == pytest.approx(2 * 100 / 3600, rel=0.05)


def test_the_incident_of_a_node_ingest_forgot_closes_once_it_is_back_and_well(ingest, clock):
    run(ingest, clock, 3, with_health("n1", NVLINK_DOWN), with_health("n2"))
    ingest.forget_node("n1")  # down past GPULSE_NODE_FORGET_AFTER
    run(ingest, clock, 5, with_health("n2"))
    assert Incident.objects.get().end is None
    back = clock.now
    run(ingest, clock, HEALED_AFTER + 2, with_health("n1"), with_health("n2"))
    assert Incident.objects.get().end.timestamp() == back
