"""The Celery settings gpulse relies on, chosen on purpose."""

from dashboard.celery_app import app
from gpulse.celery_contract import (
    BENCHMARK_HARD_LIMIT,
    CONTROL_QUEUE,
    SCHEDULER_QUEUE,
    VISIBILITY_TIMEOUT,
    WEBHOOK_QUEUE,
    node_queue,
)


def test_a_worker_reserves_one_task_at_a_time_and_acknowledges_after_running_it():
    # prefetch 1: a long benchmark never holds a second task hostage on its worker;
    # acks late: a worker that dies mid-task leaves the task to be redelivered.
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_acks_late is True


def test_time_limits_end_before_the_broker_redelivers():
    # A task still running when the visibility timeout expires would be delivered twice.
    assert app.conf.task_soft_time_limit < app.conf.task_time_limit == BENCHMARK_HARD_LIMIT < VISIBILITY_TIMEOUT
    assert app.conf.broker_transport_options["visibility_timeout"] == VISIBILITY_TIMEOUT


def test_tasks_route_to_the_control_queue_or_one_nodes_queue():
    import dashboard.alerts.tasks  # noqa: F401
    import dashboard.benchmarks.tasks  # noqa: F401
    import workers.node_tasks  # noqa: F401

    assert app.conf.task_default_queue == CONTROL_QUEUE
    assert app.tasks["gpulse.benchmarks.start_job"].queue == CONTROL_QUEUE
    assert node_queue("gpu-07") == "node.gpu-07"


def test_webhook_tasks_have_their_own_queue_apart_from_benchmark_control():
    import dashboard.alerts.tasks  # noqa: F401

    assert WEBHOOK_QUEUE != CONTROL_QUEUE
    assert {q.name for q in app.conf.task_queues} == {CONTROL_QUEUE, WEBHOOK_QUEUE, SCHEDULER_QUEUE}
    assert app.tasks["gpulse.alerts.dispatch"].queue == WEBHOOK_QUEUE
    assert app.tasks["gpulse.alerts.deliver_notification"].queue == WEBHOOK_QUEUE


def test_scontrol_tasks_have_their_own_queue_apart_from_webhooks_and_benchmarks():
    import dashboard.scheduler.tasks  # noqa: F401

    assert SCHEDULER_QUEUE not in (CONTROL_QUEUE, WEBHOOK_QUEUE)
    assert app.tasks["gpulse.scheduler.drain"].queue == SCHEDULER_QUEUE
    assert app.tasks["gpulse.scheduler.resume"].queue == SCHEDULER_QUEUE
