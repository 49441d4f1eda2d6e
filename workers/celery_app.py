"""The Celery application shared by node workers and the control worker.

It imports nothing from Django: node workers on GPU nodes run tasks that touch
no database. The control, webhook and scheduler workers (all
dashboard/control_worker.py, on different queues) set Django up and register
the database tasks on this same app.
"""

import os

from celery import Celery
from kombu import Queue

from gpulse.keys import DEFAULT_REDIS_URL, Keys

CONTROL_QUEUE = "control"
# Webhook deliveries have their own queue and worker: a slow receiver never
# delays a benchmark launch on the control queue.
WEBHOOK_QUEUE = "webhooks"
# scontrol calls (draining and resuming nodes) have theirs too: a slurmctld that
# does not answer holds scheduler threads only, never ingest or a webhook.
SCHEDULER_QUEUE = "scheduler"


def node_queue(node: str) -> str:
    return f"node.{node}"


# Seconds a reserved, unacknowledged task stays invisible to other workers.
# Every task's hard time limit must stay below it, or a slow task would be
# delivered twice while the first copy still runs.
VISIBILITY_TIMEOUT = 3600
BENCHMARK_HARD_LIMIT = 1800

app = Celery("gpulse", broker=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
app.conf.update(
    task_default_queue=CONTROL_QUEUE,
    task_queues=[Queue(CONTROL_QUEUE), Queue(WEBHOOK_QUEUE), Queue(SCHEDULER_QUEUE)],
    task_acks_late=True,
    task_reject_on_worker_lost=False,
    worker_prefetch_multiplier=1,
    task_time_limit=BENCHMARK_HARD_LIMIT,
    task_soft_time_limit=BENCHMARK_HARD_LIMIT - 60,
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "global_keyprefix": Keys().celery_prefix,
    },
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    accept_content=["json"],
    result_backend=None,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)
