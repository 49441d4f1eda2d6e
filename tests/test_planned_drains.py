"""A person's maintenance drain, made before an incident began, makes it planned (dashboard/scheduler/planned.py)."""

import datetime as dt
import getpass
import logging

import pytest
from django.utils import timezone

from dashboard.reliability.models import Incident
from dashboard.scheduler import planned, slurm
from tests.slurm_cluster import NODE
from tests.test_slurm_commands import GPULSE_DRAINED, IDLE, PERSON_DRAINING

# scontrol's stamp in the recorded lines: 2026-11-25T09:08:17 in slurmctld's time zone.
STAMPED = dt.datetime(2026, 11, 25, 9, 8, 17, tzinfo=dt.UTC)


def drained(reason: str, state: str = "IDLE+DRAIN") -> slurm.NodeState:
    out = IDLE.replace("State=IDLE", f"State={state}").rstrip("\n") + f" Reason={reason}\n"
    return slurm.parse_show_node("gpu-slurm-01", out)


def test_the_stamp_says_who_drained_and_when_in_slurmctlds_time_zone(settings):
    node = slurm.parse_show_node("gpu-slurm-01", PERSON_DRAINING)
    assert (node.reason, node.reason_user, node.reason_time) == ("maintenance", "alice", STAMPED)

    settings.GPULSE_SLURM_TIME_ZONE = "Europe/Paris"  # UTC+1 in November
    assert slurm.parse_show_node("gpu-slurm-01", PERSON_DRAINING).reason_time == STAMPED - dt.timedelta(hours=1)


def test_a_reason_without_a_stamp_or_with_another_time_format_has_no_time():
    assert drained("maintenance").reason_time is None
    node = drained("maintenance [alice@yesterday]")
    assert (node.reason, node.reason_user, node.reason_time) == ("maintenance", "alice", None)
    assert slurm.parse_show_node("gpu-slurm-01", IDLE).reason_time is None


@pytest.mark.parametrize(("reason", "state", "began", "planned_"), [
    ("maintenance [alice@2026-11-25T09:08:17]", "IDLE+DRAIN", STAMPED, True),  # drained the same second
    ("PSU swap, planned [root@2026-11-25T09:08:17]", "MIXED+DRAIN", STAMPED + dt.timedelta(hours=3), True),
    ("Firmware upgrade [root@2026-11-25T09:08:17]", "DOWN*+DRAIN", STAMPED + dt.timedelta(minutes=5), True),
    # Drained after the failure began: a person reacting to it.
    ("maintenance [alice@2026-11-25T09:08:17]", "IDLE+DRAIN", STAMPED - dt.timedelta(seconds=1), False),
    # Slurm's own, a health check's and a person's drain for a fault are failures.
    ("Not responding [slurm@2026-11-25T09:08:17]", "DOWN*+DRAIN", STAMPED + dt.timedelta(hours=1), False),
    ("Kill task failed [root@2026-11-25T09:08:17]", "IDLE+DRAIN", STAMPED + dt.timedelta(hours=1), False),
    ("NHC: check_hw_ib: No IB port is ACTIVE [root@2026-11-25T09:08:17]", "IDLE+DRAIN",
     STAMPED + dt.timedelta(hours=1), False),
    ("GPU 3 throws Xid 79 [alice@2026-11-25T09:08:17]", "IDLE+DRAIN", STAMPED + dt.timedelta(hours=1), False),
    # No stamp: when it was drained is unknown.
    ("maintenance", "IDLE+DRAIN", STAMPED + dt.timedelta(hours=1), False),
    # Not drained (a reason kept after a resume is not a drain).
    ("maintenance [alice@2026-11-25T09:08:17]", "IDLE", STAMPED + dt.timedelta(hours=1), False),
])
def test_only_a_maintenance_drain_made_before_the_incident_plans_it(reason, state, began, planned_):
    assert planned.maintenance_drain(drained(reason, state), began) is planned_


def test_gpulses_own_drain_never_plans_an_incident(settings):
    settings.GPULSE_PLANNED_DRAIN_REASON = r"nvlink"  # even one whose reason would match
    node = slurm.parse_show_node("gpu-slurm-01", GPULSE_DRAINED)
    assert not planned.maintenance_drain(node, STAMPED + dt.timedelta(hours=1))


def test_a_site_names_its_own_maintenance_reasons(settings):
    settings.GPULSE_PLANNED_DRAIN_REASON = r"^CHG\d+"  # change tickets
    later = STAMPED + dt.timedelta(hours=1)
    assert planned.maintenance_drain(drained("chg4711 reseat GPU 2 [bob@2026-11-25T09:08:17]"), later)
    assert not planned.maintenance_drain(drained("maintenance [bob@2026-11-25T09:08:17]"), later)


# --- against a real slurmctld ---

def incident(node: str, start: dt.datetime, end: dt.datetime | None = None, **fields) -> Incident:
    return Incident.objects.create(node=node, component="node_down", cause="node down: no sample for more than 30 s",
                                   start=start, end=end, **fields)


@pytest.mark.django_db
def test_incidents_after_a_persons_maintenance_drain_are_planned_and_the_others_not(slurm_cluster):
    now = timezone.now()
    before = incident(NODE, now - dt.timedelta(hours=1), end=now - dt.timedelta(minutes=30))
    slurm_cluster.drain_as_person("maintenance: PSU swap")
    after = incident(NODE, now + dt.timedelta(seconds=2))  # the reboot the drain was for
    elsewhere = incident("gpu-not-in-slurm", now + dt.timedelta(seconds=2))
    imported = incident(NODE, now + dt.timedelta(seconds=2), source=Incident.IMPORTED)
    old = incident(NODE, now - planned.LOOK_BACK - dt.timedelta(minutes=1))

    assert planned.mark() == 1
    after.refresh_from_db()
    assert after.planned and after.drain_checked
    assert after.planned_by.startswith(f"Slurm drain by {getpass.getuser()} at ")  # who ran scontrol
    assert after.planned_by.endswith(": maintenance: PSU swap")
    for other in (before, elsewhere):  # before the drain; a node Slurm does not know
        other.refresh_from_db()
        assert (other.planned, other.drain_checked) == (False, True)
    for other in (imported, old):  # not asked about
        other.refresh_from_db()
        assert (other.planned, other.drain_checked) == (False, False)

    # Asked once: a drain made later changes nothing, and a second pass asks nothing.
    assert planned.mark() == 0
    before.refresh_from_db()
    assert before.planned is False


@pytest.mark.django_db
def test_a_drain_for_a_fault_made_after_the_incident_leaves_it_a_failure(slurm_cluster):
    failing = incident(NODE, timezone.now() - dt.timedelta(seconds=5))
    slurm_cluster.drain_as_person("maintenance after GPU 3 fell off the bus")  # matches, but came after
    assert planned.mark() == 0
    failing.refresh_from_db()
    assert (failing.planned, failing.drain_checked) == (False, True)


@pytest.mark.django_db
def test_with_slurmctld_away_the_incidents_wait_for_the_next_pass(slurm_cluster, settings, caplog):
    settings.GPULSE_SCONTROL_TIMEOUT = 2
    slurm_cluster.drain_as_person("maintenance")
    waiting = incident(NODE, timezone.now() + dt.timedelta(seconds=2))
    slurm_cluster.stop_controller()
    with caplog.at_level(logging.WARNING, logger="dashboard.scheduler.planned"):
        assert planned.mark() == 0
    waiting.refresh_from_db()
    assert (waiting.planned, waiting.drain_checked) == (False, False)
    assert any(f"could not ask Slurm about {NODE}: scontrol" in r.getMessage() for r in caplog.records)
