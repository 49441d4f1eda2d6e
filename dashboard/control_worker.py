"""Celery entry point of the control and webhook workers, which set Django up.

`celery -A dashboard.control_worker worker -Q control` starts, watches and
records benchmark jobs; `celery -A dashboard.control_worker worker -Q webhooks`
delivers webhooks, apart, so a slow receiver never delays a job, and
`-Q scheduler` drains and resumes Slurm nodes (only where GPULSE_SLURM_DRAIN
is on). All record through the models, hence Django first.
Each control worker process runs the benchmark reaper
(dashboard/benchmarks/reaper.py) while it runs.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django.setup()

from celery.signals import worker_ready, worker_shutdown  # noqa: E402
from django.conf import settings  # noqa: E402

from dashboard.benchmarks.reaper import Reaper  # noqa: E402
from workers.celery_app import app  # noqa: E402

app.conf.broker_url = settings.REDIS_URL
app.autodiscover_tasks(["dashboard.alerts", "dashboard.benchmarks", "dashboard.scheduler"], related_name="tasks")

__all__ = ["app"]

_reaper = Reaper()


@worker_ready.connect
def start_reaper(**_) -> None:
    _reaper.start()


@worker_shutdown.connect
def stop_reaper(**_) -> None:
    _reaper.stop()
