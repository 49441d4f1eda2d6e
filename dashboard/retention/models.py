from django.db import models


class Watermark(models.Model):
    """How far a retention job has got: every bucket before ``until`` is done (dashboard/retention/downsample.py)."""

    name = models.CharField(max_length=64, unique=True)
    until = models.DateTimeField()

    def __str__(self):
        return f"{self.name} until {self.until:%Y-%m-%d %H:%M}"
