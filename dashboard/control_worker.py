"""Celery entry point of the control and webhook workers, which set Django up.

`celery -A dashboard.control_worker worker -Q control` starts, watches and
records benchmark jobs; `celery -A dashboard.control_worker worker -Q webhooks`
delivers webhooks, apart, so a slow receiver never delays a job. Both record
through the models, hence Django first.
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
