from django.db import models


class HealthChange(models.Model):
    """A node's health verdict changed (dashboard/health/node_health.py): shown on the node page and by the API."""

    node = models.CharField(max_length=128)
    at = models.DateTimeField()
    old = models.CharField(max_length=16, help_text="verdict before: healthy, degraded, failing or unknown")
    new = models.CharField(max_length=16)
    reason = models.CharField(max_length=400, blank=True, help_text="the worst finding when the verdict changed")

    class Meta:
        # The table the live app made before health had an app of its own: moved, not copied.
        db_table = "live_healthchange"
        indexes = [models.Index(fields=["node", "-at"], name="live_health_node_2eaff6_idx")]
