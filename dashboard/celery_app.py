"""The control host's Celery application: its queues (control, webhooks,
scheduler) and their routing. The tasks of dashboard/benchmarks,
dashboard/alerts and dashboard/scheduler are registered on it; the control,
webhook and scheduler workers (dashboard/control_worker.py, on different
queues) run them, and the web and ingest processes send them.

Node tasks are sent by name into each node's own key space
(dashboard/benchmarks/tasks.py); the settings both sides share are in
gpulse/celery_contract.py.
"""

from celery import Celery
from kombu import Queue

from gpulse.celery_contract import CONTROL_QUEUE, SCHEDULER_QUEUE, WEBHOOK_QUEUE, celery_settings
from gpulse.redis_url import redis_url_from_environment

app = Celery("gpulse", broker=redis_url_from_environment())  # REDIS_URL or $GPULSE_REDIS_URL_FILE
app.conf.update(
    **celery_settings(),
    task_default_queue=CONTROL_QUEUE,
    task_queues=[Queue(CONTROL_QUEUE), Queue(WEBHOOK_QUEUE), Queue(SCHEDULER_QUEUE)],
)
