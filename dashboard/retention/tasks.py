"""The retention pass as a Celery task on the control queue, sent every GPULSE_RETENTION_INTERVAL seconds
by the one `celery beat` of the cluster (its schedule: dashboard/control_worker.py).

Each message expires an interval after beat sent it: a pass that outlasts the interval, or a worker that
was down, leaves no backlog of passes to run one after the other, only the next one due.
"""

from dashboard.celery_app import app
from dashboard.retention.runner import run_retention
from gpulse.celery_contract import CONTROL_QUEUE

RETENTION_TASK = "gpulse.retention.run"


@app.task(name=RETENTION_TASK, queue=CONTROL_QUEUE, ignore_result=True)
def run() -> dict[str, int]:
    """One pass at the clock's time; runner.py logs what it did."""
    return run_retention()
