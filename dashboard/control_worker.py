"""Celery entry point of the control worker: `celery -A dashboard.control_worker worker -Q control`.

It sets Django up first, because its tasks record results and deliver webhooks
through the models.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django.setup()

from django.conf import settings  # noqa: E402

from workers.celery_app import app  # noqa: E402

app.conf.broker_url = settings.REDIS_URL
app.autodiscover_tasks(["dashboard.alerts", "dashboard.benchmarks"], related_name="tasks")

__all__ = ["app"]
