"""Incidents that follow a person's maintenance drain are planned: the scheduler worker asks Slurm.

A person drains a node before working on it, and the work (a reboot, a
firmware flash, a GPU swap) then looks like a failure to ingest: the node goes
down or fails a check, and an incident opens. Every minute the scheduler
worker takes the watched incidents of the last day it has not asked about,
asks slurmctld once per node, and marks an incident planned when its node is
drained, by a reason matching GPULSE_PLANNED_DRAIN_REASON and not gpulse's,
since before the incident began (scontrol's stamp says when). A drain made
after the incident began is a person reacting to a failure: it stays one.
Slurm itself and health-check scripts drain nodes too, under their own
reasons ("Not responding", "Kill task failed", "NHC: …"): those are failures.

Each incident is asked about once. Slurm unreachable leaves them for the next
pass; a node Slurm does not know is asked about no more.
"""

import datetime as dt
import logging
import re

from django.conf import settings
from django.utils import timezone

from dashboard.periodic import PeriodicPass
from dashboard.reliability.models import Incident
from dashboard.scheduler import slurm

log = logging.getLogger(__name__)

INTERVAL_S = 60
# Older incidents are not asked about: a drain seen now says little about a day ago.
LOOK_BACK = dt.timedelta(days=1)
PLANNED_BY_LENGTH = Incident._meta.get_field("planned_by").max_length


def maintenance_drain(node: slurm.NodeState, began: dt.datetime) -> bool:
    """Whether ``node`` was drained for maintenance by a person at or before ``began``."""
    return (node.drained and not node.drained_by_gpulse and node.reason_time is not None
            and node.reason_time <= began
            and re.search(settings.GPULSE_PLANNED_DRAIN_REASON, node.reason, re.IGNORECASE) is not None)


def mark() -> int:
    """Ask Slurm about the incidents not asked about yet; return how many became planned."""
    since = timezone.now() - LOOK_BACK
    waiting = Incident.objects.filter(source=Incident.WATCHED, drain_checked=False, planned=False, start__gte=since)
    by_node: dict[str, list[Incident]] = {}
    for incident in waiting:
        by_node.setdefault(incident.node, []).append(incident)
    marked = 0
    for name, incidents in by_node.items():
        try:
            state = slurm.show_node(name)
        except slurm.SlurmError as exc:
            if not exc.permanent:  # slurmctld away: the next pass asks again
                log.warning("planned drains: could not ask Slurm about %s: %s", name, exc.message)
                continue
            state = None  # not a Slurm node: nothing to ask again
        for incident in incidents:
            if state is not None and maintenance_drain(state, incident.start):
                marked += Incident.objects.filter(id=incident.id, planned=False).update(
                    planned=True, drain_checked=True, planned_by=drained_by(state)[:PLANNED_BY_LENGTH])
            else:
                Incident.objects.filter(id=incident.id).update(drain_checked=True)
    if marked:
        log.info("planned drains: %d incident(s) planned, their nodes drained for maintenance before", marked)
    return marked


def drained_by(node: slurm.NodeState) -> str:
    when = node.reason_time.isoformat() if node.reason_time else "?"
    return f"Slurm drain by {node.reason_user or '?'} at {when}: {node.reason}"


class PlannedDrains(PeriodicPass):
    def __init__(self, interval_s: float = INTERVAL_S):
        super().__init__("planned drains", mark, interval_s)
