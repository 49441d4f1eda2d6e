"""`manage.py collective OP --nodes …` (or `allreduce --nodes …`): the same job the dashboard launches, from a shell."""

import time

from django.core.management.base import CommandError

from dashboard.benchmarks.launch import LaunchForm, Refusal, launch
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.outcome import valid_row
from dashboard.benchmarks.tasks import REPORT_GRACE_S
from dashboard.redis_client import redis_client
from gpulse import job_events
from gpulse.job_status import ACTIVE
from gpulse.keys import Keys
from gpulse.sweep_spec import Row


def launch_job(options: dict) -> BenchmarkJob:
    form = LaunchForm({
        "op": options["op"], "nodes": options["nodes"], "ranks_per_node": options["ranks_per_node"],
        "backend": options["backend"], "dtype": options["dtype"], "min_bytes": str(options["min_bytes"]),
        "max_bytes": str(options["max_bytes"]),
        "step_factor": options["factor"], "warmup_iters": options["warmup"], "iters": options["iters"],
        "correctness_check": not options["no_check"], "timeout_seconds": int(options["timeout"]),
        "confirm_held": options["confirm_held"],
    })
    if not form.is_valid():
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        live = [name for name, _label in form.fields["nodes"].choices]
        raise CommandError(f"cannot launch: {problems} (nodes up now: {', '.join(live) or 'none'})")
    outcome = launch(None, form.cleaned_data)
    if isinstance(outcome, Refusal):
        raise CommandError(outcome.message)
    return outcome


def follow_job(job: BenchmarkJob, on_row) -> tuple[BenchmarkJob, list[Row]]:
    """Call on_row for each row rank 0 streams; return the recorded job and its rows."""
    client, keys = redis_client(), Keys()
    deadline = time.time() + job.timeout_seconds + 2 * REPORT_GRACE_S
    rows: list[Row] = []
    after: dict[str, str] = {}
    while time.time() < deadline:
        # The control stream's `final`, and the rows of rank 0's node from its own stream.
        for entry in job_events.read(client, keys, job.pk, after, job.nodes[:1], block_ms=1000):
            event = entry.event
            if event is None:
                continue
            if event["kind"] == "row" and entry.source is not None and valid_row(event.get("row")):
                row = Row(**event["row"])
                rows.append(row)
                on_row(row)
            elif event["kind"] == "final" and entry.source is None:
                job.refresh_from_db()
                return job, rows
        job.refresh_from_db()
        if job.status not in ACTIVE:
            return job, rows
    raise CommandError(f"job {job.pk} is still {job.status} after its time limit: is the control worker running?")
