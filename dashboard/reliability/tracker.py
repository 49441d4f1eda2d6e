"""Ingest's incident stage: opens and closes each node's incidents and counts the node-hours watched.

Ingest calls observe() once per tick with the nodes whose status or health
changed, and write() in its database stage. An incident opens when a node
turns failing (its worst failed check is the component: components.py; a GPU
off the bus fails gpu_count, or Xid 79) or has been down for ``min_down``
seconds (it starts at the node's last sample).

Flapping: an incident closes only once its node has been up and not failing
for ``healed_after`` seconds; its end is when that healthy stretch began. A
failure or a down within that time continues the same incident, so a node that
flaps opens one incident, not one per flap. A node has one open incident at
a time, counted against what failed first.

Like the verdict changes (dashboard/health/changes.py), a failed write
changes nothing in memory: the rows wait for the next one. The first write
reads the incidents a stopped ingest left open and carries them on, so a
restart opens no duplicate.
"""

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from dashboard.health.node_health import finding_text, worst
from dashboard.reliability import components
from dashboard.reliability.models import Exposure, Incident, MaintenanceWindow
from gpulse import health
from gpulse.status import DOWN

log = logging.getLogger("gpulse.ingest")

HEALED_AFTER = 60.0
# Longer between two ticks, ingest was not watching (stopped, or stuck): that time is not counted.
MAX_TICK_GAP = 10.0
EXPOSURE_FLUSH_EVERY = 60.0
# Closed incidents waiting for the database past this many: the oldest are dropped and counted as lost.
MAX_PENDING = 10_000
CAUSE_LENGTH = Incident._meta.get_field("cause").max_length
PLANNED_BY_LENGTH = Incident._meta.get_field("planned_by").max_length


@dataclass
class OpenIncident:
    node: str
    component: str
    gpu: int | None
    cause: str
    start: float
    end: float | None = None
    id: int | None = None  # the row's, once written
    written_end: float | None = None  # the end the row has


def _time(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


class IncidentTracker:
    def __init__(self, min_down: float | None = None, healed_after: float = HEALED_AFTER):
        self.min_down = settings.GPULSE_INCIDENT_MIN_DOWN if min_down is None else min_down
        self.healed_after = healed_after
        self.open: dict[str, OpenIncident] = {}
        self.healthy_since: dict[str, float] = {}  # node with an open incident -> since when it is well
        self.closed: list[OpenIncident] = []  # closed, not yet written
        self.watch: set[str] = set()  # nodes to look at every tick: open incidents, downs not yet long enough
        self.seen_all = False  # the first tick looks at every node (a restart starts with nodes down or failing)
        self.adopted = False  # the open rows of an earlier ingest were read
        self.last_tick: float | None = None
        self.node_seconds: dict[float, float] = {}  # hour start (unix) -> node-seconds watched, not yet written
        self.next_exposure_flush = 0.0
        self.lost = 0

    # -- each tick, in memory -----------------------------------------------------

    def observe(self, now: float, changed, nodes: Mapping, health_of: Mapping) -> None:
        """Judge the nodes that changed and those watched; ``nodes``: name -> NodeState, ``health_of``:
        name -> NodeHealth."""
        self._count_exposure(now, nodes)
        names = set(nodes) if not self.seen_all else self.watch.union(changed)
        self.seen_all = True
        for name in names:
            node = nodes.get(name)
            if node is None:  # forgotten (down a week): its incident stays open until it is back and well
                if name not in self.open:
                    self.watch.discard(name)
                continue
            self._judge(name, node, health_of.get(name), now)

    def _count_exposure(self, now: float, nodes: Mapping) -> None:
        last, self.last_tick = self.last_tick, now
        if last is None or not 0 < now - last <= MAX_TICK_GAP:
            return
        up = sum(1 for node in nodes.values() if node.status != DOWN)
        hour = last - last % 3600
        self.node_seconds[hour] = self.node_seconds.get(hour, 0.0) + up * (now - last)

    def _failure(self, node, node_health, now: float) -> OpenIncident | None:
        """What is wrong with the node now, as an incident it would open; None when it is well."""
        if node.status == DOWN:
            if now - node.arrived < self.min_down:
                return None
            return OpenIncident(node.name, components.NODE_DOWN, None,
                                f"node down: no sample for more than {self.min_down:g} s", node.arrived)
        if node_health is None or node_health.verdict != health.FAILING:
            return None
        key = worst(node_health.findings)
        if key is None:  # a failing verdict has a failed finding; a record from Redis might not
            return None
        check, gpu, _ = key
        finding = node_health.findings[key]
        return OpenIncident(node.name, components.component(check, finding.reason), gpu,
                            finding_text(check, gpu, finding.reason)[:CAUSE_LENGTH], finding.since)

    def _judge(self, name: str, node, node_health, now: float) -> None:
        failure = self._failure(node, node_health, now)
        incident = self.open.get(name)
        if failure is not None:
            self.healthy_since.pop(name, None)
            if incident is None:
                self.open[name] = failure
                log.info("incident opened: %s %s (%s)", name, failure.component, failure.cause)
        elif incident is not None:
            if node.status == DOWN:  # down, not yet for long: the incident does not heal meanwhile
                self.healthy_since.pop(name, None)
            else:
                since = self.healthy_since.setdefault(name, now)
                if now - since >= self.healed_after:
                    self._close(name, since)
        # Watched every tick: an open incident (to heal), a down node (until it is down long enough, or back).
        if name in self.open or node.status == DOWN:
            self.watch.add(name)
        else:
            self.watch.discard(name)

    def _close(self, name: str, end: float) -> None:
        incident = self.open.pop(name)
        incident.end = end
        self.healthy_since.pop(name, None)
        self.closed.append(incident)
        log.info("incident closed: %s %s after %.0f s", name, incident.component, end - incident.start)
        excess = len(self.closed) - MAX_PENDING
        if excess > 0:
            del self.closed[:excess]
            self.lost += excess
            log.error("incidents: dropped %d closed incidents: more than %d wait for the database", excess,
                      MAX_PENDING)

    # -- the database stage -------------------------------------------------------

    def write(self, now: float) -> None:
        """Write what changed (one transaction); on a database error everything stays for the next try."""
        if not self.adopted:
            self._adopt()
        fresh = [incident for incident in self.open.values() if incident.id is None]
        closing = list(self.closed)
        flush_exposure = now >= self.next_exposure_flush and self.node_seconds
        if not fresh and not closing and not flush_exposure:
            return
        ids: list[tuple[OpenIncident, int]] = []
        with transaction.atomic():
            for incident in fresh + closing:
                if incident.id is None:
                    ids.append((incident, self._create(incident)))
                elif incident.end is not None and incident.end != incident.written_end:
                    Incident.objects.filter(id=incident.id).update(end=_time(incident.end))
            if flush_exposure:
                self._write_exposure()
        # Only now that the transaction is in: a rolled-back one leaves every object as it was.
        for incident, row_id in ids:
            incident.id = row_id
        for incident in fresh + closing:
            incident.written_end = incident.end
        del self.closed[:len(closing)]
        if flush_exposure:
            self.node_seconds = {}
            self.next_exposure_flush = now + EXPOSURE_FLUSH_EVERY

    def _adopt(self) -> None:
        """Carry on the incidents an earlier ingest left open: one seen open again is the same incident."""
        for row in Incident.objects.filter(source=Incident.WATCHED, end=None):
            start = row.start.timestamp()
            mine = self.open.get(row.node)
            if mine is None:
                self.open[row.node] = OpenIncident(row.node, row.component, row.gpu, row.cause, start, id=row.id)
                self.watch.add(row.node)  # judged next tick: closes once the node is well
            elif mine.id is None:
                mine.id, mine.component, mine.gpu, mine.cause, mine.start = (row.id, row.component, row.gpu,
                                                                             row.cause, start)
        self.adopted = True

    @staticmethod
    def _create(incident: OpenIncident) -> int:
        start = _time(incident.start)
        window = MaintenanceWindow.objects.filter(Q(node="") | Q(node=incident.node), start__lte=start,
                                                  end__gt=start).first()
        row = Incident.objects.create(
            node=incident.node, component=incident.component, gpu=incident.gpu, cause=incident.cause, start=start,
            end=None if incident.end is None else _time(incident.end), planned=window is not None,
            planned_by="" if window is None else f"maintenance window: {window}"[:PLANNED_BY_LENGTH],
        )
        return row.id

    def _write_exposure(self) -> None:
        for hour, seconds in self.node_seconds.items():
            start = _time(hour)
            updated = Exposure.objects.filter(start=start, source=Incident.WATCHED).update(
                node_hours=F("node_hours") + seconds / 3600)
            if not updated:
                Exposure.objects.create(start=start, end=start + dt.timedelta(hours=1), node_hours=seconds / 3600)
