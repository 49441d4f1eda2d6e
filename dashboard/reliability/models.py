"""The fleet's reliability record: incidents, the node-hours watched, and maintenance windows.

An incident is one node's failure from when it began to when the node was
healthy again (dashboard/reliability/tracker.py opens and closes the watched
ones; imported ones come from a site's own history). Planned incidents
(maintenance) are counted apart and never in a failure rate.
"""

from django.db import models


class Incident(models.Model):
    WATCHED = "watched"  # opened by ingest
    IMPORTED = "imported"
    SOURCES = ((WATCHED, "watched by gpulse"), (IMPORTED, "imported"))

    node = models.CharField(max_length=200)
    # dashboard/reliability/components.py for the watched ones; imported ones keep the name as written.
    component = models.CharField(max_length=100)
    gpu = models.PositiveSmallIntegerField(null=True, blank=True)
    cause = models.CharField(max_length=500, blank=True)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True, help_text="when the node was healthy again; empty while open")
    planned = models.BooleanField(default=False, help_text="maintenance: counted apart, never as a failure")
    planned_by = models.CharField(max_length=300, blank=True,
                                  help_text="what made it planned: a maintenance window or a person's Slurm drain")
    source = models.CharField(max_length=10, choices=SOURCES, default=WATCHED)
    # Whether the scheduler worker has asked Slurm if a person drained the node before it began
    # (dashboard/scheduler/planned.py): asked once, so a later drain never changes the answer.
    drain_checked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-start", "-id"]
        indexes = [models.Index(fields=["start"]), models.Index(fields=["node", "end"])]

    def __str__(self):
        return f"{self.node} {self.component} {self.start:%Y-%m-%d %H:%M}"


class Exposure(models.Model):
    """Node-hours watched over [start, end): one row per hour ingest watched, one per imported window."""

    start = models.DateTimeField()
    end = models.DateTimeField()
    node_hours = models.FloatField()
    source = models.CharField(max_length=10, choices=Incident.SOURCES, default=Incident.WATCHED)

    class Meta:
        ordering = ["start"]
        indexes = [models.Index(fields=["start"])]
        # One row per watched hour, so ingest adds to it.
        constraints = [models.UniqueConstraint(fields=["start"], condition=models.Q(source=Incident.WATCHED),
                                               name="one_watched_exposure_per_hour")]


class MaintenanceWindow(models.Model):
    """A window of planned work: an incident of its node (blank: any node) starting within it is planned."""

    node = models.CharField(max_length=200, blank=True, help_text="blank: every node")
    start = models.DateTimeField()
    end = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-start"]

    def __str__(self):
        return f"{self.node or 'all nodes'} {self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M}"
