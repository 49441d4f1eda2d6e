"""Drain records: every time an alert rule with "drain" fired for a node, and what gpulse did about it.

A record is made by the alert evaluator, pending, in the transaction that
records the firing; the scheduler worker claims it (compare-and-set on
``claim``) before it calls scontrol, so a retried or duplicated task never
drains twice. A node counts as drained by gpulse only while it has a record
in state ``drained`` and its Slurm reason starts with "gpulse:".
"""

from django.db import models


class DrainRecord(models.Model):
    PENDING = "pending"  # queued, or waiting to try scontrol again
    DRAINED = "drained"
    RESUMED = "resumed"
    FAILED = "failed"  # scontrol kept failing; ``error`` says why and what is left to do
    SKIPPED_BY_PERSON = "skipped_by_person"  # a person drained, re-drained or resumed the node: hands off
    CANCELLED = "cancelled"  # the alert resolved before the drain ran
    STATES = (
        (PENDING, "pending"),
        (DRAINED, "drained"),
        (RESUMED, "resumed"),
        (FAILED, "failed"),
        (SKIPPED_BY_PERSON, "left to a person"),
        (CANCELLED, "cancelled"),
    )

    node = models.CharField(max_length=200)
    rule = models.ForeignKey("alerts.Rule", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    rule_name = models.CharField(max_length=100)  # kept when the rule is deleted
    alert = models.ForeignKey("alerts.Alert", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # The reason as written to Slurm, "gpulse: ..." (dashboard/scheduler/slurm.py).
    reason = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=STATES, default=PENDING)
    error = models.CharField(max_length=500, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)  # scontrol attempts of the current step
    # The worker that holds the record while it runs scontrol; a claim older
    # than the scontrol timeout (a worker killed mid-call) may be taken over.
    claim = models.CharField(max_length=32, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    drained_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["node", "state"])]

    def __str__(self):
        return f"{self.node} {self.state} ({self.rule_name})"
