"""Celery entry point of the control and webhook workers and of beat, which set Django up.

`celery -A dashboard.control_worker worker -Q control` starts, watches and
records benchmark jobs and runs the retention pass (dashboard/retention/tasks.py:
hourly rollups, old rows pruned); `celery -A dashboard.control_worker worker -Q webhooks`
delivers webhooks, apart, so a slow receiver never delays a job, and
`-Q scheduler` drains and resumes Slurm nodes (only where GPULSE_SLURM_DRAIN
is on). All record through the models, hence Django first.
`celery -A dashboard.control_worker beat`, one per cluster, sends the retention
pass every GPULSE_RETENTION_INTERVAL seconds (docs/retention.md).
Each worker process runs the benchmark reaper (dashboard/benchmarks/reaper.py)
while it runs, and the scheduler worker the drain sweeper
(dashboard/scheduler/sweeper.py) and the planned-drain pass
(dashboard/scheduler/planned.py).
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django.setup()

import logging  # noqa: E402

from celery.signals import worker_ready, worker_shutdown  # noqa: E402
from django.conf import settings  # noqa: E402

from dashboard.benchmarks.reaper import Reaper  # noqa: E402
from dashboard.celery_app import app  # noqa: E402
from dashboard.retention.tasks import RETENTION_TASK  # noqa: E402  (registers the task too)
from dashboard.scheduler.planned import PlannedDrains  # noqa: E402
from dashboard.scheduler.sweeper import Sweeper  # noqa: E402
from gpulse.celery_contract import CONTROL_QUEUE, SCHEDULER_QUEUE  # noqa: E402

app.conf.broker_url = settings.REDIS_URL
app.autodiscover_tasks(["dashboard.alerts", "dashboard.benchmarks", "dashboard.scheduler"], related_name="tasks")
# Read by `celery beat` only. A pass beat sends expires an interval later: one still running when the
# next is due, or a worker that was down, leaves no backlog of passes behind it.
app.conf.beat_schedule = {
    "retention": {
        "task": RETENTION_TASK,
        "schedule": settings.GPULSE_RETENTION_INTERVAL,
        "options": {"queue": CONTROL_QUEUE, "expires": settings.GPULSE_RETENTION_INTERVAL},
    },
}

__all__ = ["app"]

log = logging.getLogger(__name__)

_reaper = Reaper()
_sweeper = Sweeper()
_planned_drains = PlannedDrains()


def consumes(consumer, queue: str) -> bool:
    return any(q.name == queue for q in consumer.task_consumer.queues)


@worker_ready.connect
def start_reaper(sender, **_) -> None:
    _reaper.start()
    if settings.GPULSE_SLURM_DRAIN and consumes(sender, SCHEDULER_QUEUE):
        _sweeper.start()
        _planned_drains.start()
        log.info("drain sweeper and planned-drain pass started: every %g s", _sweeper.interval_s)


@worker_shutdown.connect
def stop_reaper(**_) -> None:
    _reaper.stop()
    _sweeper.stop()
    _planned_drains.stop()
