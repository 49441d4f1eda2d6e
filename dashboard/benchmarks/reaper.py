"""The reaper: every second, settle each running job from what Redis holds.

Nodes report on their own events streams of the job and send the control host
nothing (their ACL users cannot reach its queues): the reaper ends each job
from those streams (all nodes reported: recorded; a failure: failed; past the
deadline: timed out, naming the silent nodes; a node whose worker died:
failed), within about a second of its last report. A pass costs one indexed
query for the running jobs and one Redis round trip per running job
(dashboard/benchmarks/tasks.py settle), the same for the running GPU check runs
(dashboard/benchmarks/gpu_check_runs.py), and one query for the running fabric
sweeps (each moved on by dashboard/benchmarks/sweeps.py advance), nothing when
none runs.

Every control worker process runs one reaper thread (started on Celery's
`worker_ready`, see dashboard/control_worker.py; dashboard/periodic.py says
why not Celery beat). Passes of several workers at once are harmless: every end is a
compare-and-set, so two reapers cost two reads, never two results. The thread
holds no pool slot, and it runs while any control worker does.
"""

import logging

from dashboard.benchmarks.gpu_check_runs import settle_gpu_checks
from dashboard.benchmarks.models import BenchmarkJob, FabricSweep, GpuCheckRun
from dashboard.benchmarks.sweeps import advance
from dashboard.benchmarks.tasks import settle
from dashboard.periodic import PeriodicPass
from gpulse.job_status import JobStatus

log = logging.getLogger(__name__)

# A job ends at most this long after its last node's report.
INTERVAL_S = 1


def reap() -> None:
    """Settle every running job and GPU check run once, then move every running fabric sweep on
    (sweeps.advance)."""
    for job in BenchmarkJob.objects.filter(status=JobStatus.RUNNING):
        try:
            settle(job)
        except Exception:  # one bad job must not stop the others being reaped
            log.exception("benchmark job %s could not be settled", job.pk)
    for run in GpuCheckRun.objects.filter(status=JobStatus.RUNNING):
        try:
            settle_gpu_checks(run)
        except Exception:
            log.exception("GPU check run %s could not be settled", run.pk)
    for sweep in FabricSweep.objects.filter(status=JobStatus.RUNNING):
        try:
            advance(sweep)
        except Exception:
            log.exception("fabric sweep %s could not be advanced", sweep.pk)


class Reaper(PeriodicPass):
    def __init__(self, interval_s: float = INTERVAL_S):
        super().__init__("benchmark reaper", reap, interval_s)
