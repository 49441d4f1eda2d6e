"""Celery entry point of a GPU node's worker: `celery -A workers.node_worker worker -Q node.<name>`.

Its tasks run benchmark ranks and touch no database, so Django is never imported.
While it runs it keeps a heartbeat for each node whose queue it consumes
(workers/heartbeat.py), so launches on a node without a worker are refused.
"""

import os

import redis
from celery.signals import worker_ready, worker_shutdown

from gpulse.keys import DEFAULT_REDIS_URL
from workers import node_tasks  # noqa: F401  (registers the tasks)
from workers.celery_app import app, node_queue
from workers.heartbeat import Heartbeat

__all__ = ["app"]

NODE_QUEUE = node_queue("")  # the prefix of every node's queue name
_heartbeat: Heartbeat | None = None


@worker_ready.connect
def start_heartbeat(sender, **_) -> None:
    global _heartbeat
    nodes = [queue.name.removeprefix(NODE_QUEUE) for queue in sender.task_consumer.queues
             if queue.name.startswith(NODE_QUEUE)]
    if nodes:
        # Its own client: the tasks' client is closed on shutdown before or after this one.
        _heartbeat = Heartbeat(redis.Redis.from_url(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
                                                    socket_timeout=5, socket_connect_timeout=2), nodes)
        _heartbeat.start()


@worker_shutdown.connect
def stop_heartbeat(**_) -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None
