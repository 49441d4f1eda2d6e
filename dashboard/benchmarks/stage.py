"""The overview's benchmark counters as an ingest stage: jobs running and queued, and the job throughput
(dashboard/benchmarks/throughput.py) in every frame's summary."""

import time

from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.throughput import job_throughput
from dashboard.live.stages import Stage

# Job throughput changes with finished jobs, not every tick: refresh it this often.
THROUGHPUT_EVERY = 10.0


class BenchmarkSummaryStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.throughput: dict = {}
        self.throughput_read = -THROUGHPUT_EVERY  # time.monotonic()
        self.latest: dict = {}

    def summary(self) -> dict:
        return self.latest

    def write_database(self, now: float) -> None:
        if time.monotonic() - self.throughput_read >= THROUGHPUT_EVERY:
            figures = job_throughput(recent=20)
            self.throughput = {
                "jobs_last_hour": figures["completed_last_hour"],
                "job_mean_s": figures["mean_duration_s"],
                # {"op", "nodes", "job", "busbw" (out-of-place), "inplace_busbw", "size", "previous", "finished"}
                "latest_busbw": figures["bandwidth"][0] if figures["bandwidth"] else None,
            }
            self.throughput_read = time.monotonic()
        jobs = BenchmarkJob.objects.active_counts()
        self.latest = {"jobs_running": jobs["running"], "jobs_queued": jobs["queued"], **self.throughput}
