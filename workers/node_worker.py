"""Celery entry point of a GPU node's worker: `celery -A workers.node_worker worker -Q node.<name>`.

Its tasks run benchmark ranks and touch no database, so Django is never imported.
Before it connects it moves to its node's own Celery key space
(gpulse/celery_contract.py, node_broker): it consumes only node queues, all of one
broker (one node's, or the demo's simulated nodes'), with remote control and
events off; start it with --without-gossip --without-mingle, which need the
pidbox its ACL user does not have.
While it runs it keeps a heartbeat for each node whose queue it consumes
(workers/heartbeat.py), so launches on a node without a worker are refused.
"""


from celery.signals import celeryd_init, worker_ready, worker_shutdown

from gpulse.celery_contract import node_broker, node_queue, node_transport_options
from gpulse.node_redis import node_redis_client
from workers import gpu_check_task, node_tasks  # noqa: F401  (registers the tasks)
from workers.celery_app import app
from workers.heartbeat import Heartbeat

__all__ = ["app"]

NODE_QUEUE = node_queue("")  # the prefix of every node's queue name
_heartbeat: Heartbeat | None = None


def queue_names(queues) -> list[str]:
    """The -Q option as the worker got it: a list, or one comma-separated string."""
    items = [queues] if isinstance(queues, str) else list(queues or ())
    return [name.strip() for item in items for name in str(item).split(",") if name.strip()]


def broker_of(queues: list[str]) -> str:
    """The one broker name that holds every queue; ValueError for any other set of queues."""
    others = [name for name in queues if not name.startswith(NODE_QUEUE) or name == NODE_QUEUE]
    if not queues or others:
        raise ValueError(f"a node worker consumes only node queues (-Q {NODE_QUEUE}<name>), not {others or 'none'}")
    brokers = {node_broker(name.removeprefix(NODE_QUEUE)) for name in queues}
    if len(brokers) > 1:
        raise ValueError(f"a node worker consumes the queues of one node only, not of {', '.join(sorted(brokers))}")
    return brokers.pop()


@celeryd_init.connect
def use_node_broker(sender=None, conf=None, options=None, **_) -> None:
    """Move to the node's own key space before the worker's first connection."""
    broker = broker_of(queue_names((options or {}).get("queues")))
    app.conf.broker_transport_options = node_transport_options(broker)
    app.conf.worker_enable_remote_control = False
    app.conf.worker_send_task_events = False


@worker_ready.connect
def start_heartbeat(sender, **_) -> None:
    global _heartbeat
    nodes = [queue.name.removeprefix(NODE_QUEUE) for queue in sender.task_consumer.queues
             if queue.name.startswith(NODE_QUEUE)]
    if nodes:
        # Its own client: the tasks' client is closed on shutdown before or after this one.
        _heartbeat = Heartbeat(node_redis_client(), nodes)
        _heartbeat.start()


@worker_shutdown.connect
def stop_heartbeat(**_) -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None
