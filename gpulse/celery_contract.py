"""What the control host's Celery app (dashboard/celery_app.py) and the node
workers' (workers/celery_app.py) agree on: queue names, which key space holds a
node's queue, the task a node runs, time limits and the settings both share.

Two kinds of key space: the control host's queues (control, webhooks,
scheduler) under Keys.celery_prefix, and one per node worker under
Keys.node_broker_prefix, which only that node's ACL user and the control user
reach (workers/node_worker.py switches to it; dashboard/benchmarks/tasks.py
sends there). Nothing a node can write is a control-host queue.

It imports neither Django nor Celery: both sides import it.
"""

import os

from gpulse.keys import Keys
from gpulse.redis_acl import SIMULATED_BROKER
from gpulse.sweep_spec import MAX_TIMEOUT_S

CONTROL_QUEUE = "control"
# Webhook deliveries have their own queue and worker: a slow receiver never
# delays a benchmark launch on the control queue.
WEBHOOK_QUEUE = "webhooks"
# scontrol calls (draining and resuming nodes) have theirs too: a slurmctld that
# does not answer holds scheduler threads only, never ingest or a webhook.
SCHEDULER_QUEUE = "scheduler"

# A node's ranks of a benchmark job (workers/node_tasks.py); the control host sends it by name.
RUN_NODE_TASK = "gpulse.benchmarks.run_node"
# A node's share of a GPU check run (workers/gpu_check_task.py, gpulse/gpu_check_report.py).
GPU_CHECKS_TASK = "gpulse.benchmarks.gpu_checks"


def node_queue(node: str) -> str:
    return f"node.{node}"


# Each node worker has a Celery key space of its own (Keys.node_broker_prefix):
# its queue, bindings and kombu's unacked hash live there, and its ACL user
# reaches nothing else of Celery's, so it can neither push a task onto a control
# queue or another node's queue nor touch their unacknowledged messages. The
# demo's one worker of every simulated node (named GPULSE_SIMULATED_NODES*, set
# only by devtools/stack.py) uses SIMULATED_BROKER instead of a node's name: one no
# node can have (the node-name rule refuses '@'), so no real node's worker shares
# its key space, and its ACL user (simulated-nodeworker) reaches simulated nodes' keys only.
# The nodes named in GPULSE_SIMULATED_EXCEPT (comma-separated) run as a real node
# does, with a worker and key space of their own: the demo's sim-01.
SIMULATED_NODES_VARIABLE = "GPULSE_SIMULATED_NODES"
SIMULATED_EXCEPT_VARIABLE = "GPULSE_SIMULATED_EXCEPT"


def is_simulated(node: str) -> bool:
    """Whether ``node`` is one of the demo's simulated nodes (with a worker of its own or not)."""
    simulated = os.environ.get(SIMULATED_NODES_VARIABLE, "")
    return bool(simulated) and node.startswith(simulated)


def node_broker(node: str) -> str:
    """The broker name whose key space holds ``node``'s queue: the node's own name,
    or SIMULATED_BROKER for a simulated node of the demo."""
    own_worker = os.environ.get(SIMULATED_EXCEPT_VARIABLE, "").split(",")
    return SIMULATED_BROKER if is_simulated(node) and node not in own_worker else node


# Seconds a reserved, unacknowledged task stays invisible to other workers.
# Every task's hard time limit must stay below it, or a slow task would be
# delivered twice while the first copy still runs.
VISIBILITY_TIMEOUT = 3600
# A job's own limit (at most MAX_TIMEOUT_S, the launch form's bound) ends before it.
BENCHMARK_HARD_LIMIT = MAX_TIMEOUT_S + 300


def transport_options(keyprefix: str) -> dict:
    """Broker transport options of a key space: the control host's, or one node worker's."""
    return {"visibility_timeout": VISIBILITY_TIMEOUT, "global_keyprefix": keyprefix}


def node_transport_options(broker: str) -> dict:
    """The broker transport options of the node worker ``broker`` (and of the
    control side's connection that sends it a task)."""
    return transport_options(Keys().node_broker_prefix(broker))


def celery_settings() -> dict:
    """The settings of both apps, in the control host's key space until a node worker moves to its own."""
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": False,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": BENCHMARK_HARD_LIMIT,
        "task_soft_time_limit": BENCHMARK_HARD_LIMIT - 60,
        "broker_transport_options": transport_options(Keys().celery_prefix),
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_backend": None,
        "task_ignore_result": True,
        "worker_hijack_root_logger": False,
        # No worker answers Celery's remote control (cancel_consumer, shutdown, pool
        # changes) or publishes events: node workers have no right on the pidbox
        # channel, and no control-host worker should obey a broadcast anyway.
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "task_send_sent_event": False,
    }
