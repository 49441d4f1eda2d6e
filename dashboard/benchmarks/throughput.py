"""Job throughput for the overview and the benchmarks page."""

import datetime as dt

from django.db.models import Avg, Count, F, Q
from django.utils import timezone

from dashboard.benchmarks.models import BenchmarkJob
from gpulse.job_status import JobStatus


def job_throughput(recent: int = 50) -> dict:
    """Return the bandwidth recent jobs measured per operation and node set (newest first, with
    the previous run's figure as the trend), and the job counters.

    The bandwidth is the out-of-place busbw at the job's largest message size
    (``busbw``), its in-place figure beside it (``inplace_busbw``), at ``size`` bytes.
    """
    now = timezone.now()
    hour_ago = now - dt.timedelta(hours=1)
    counts = BenchmarkJob.objects.aggregate(
        queued=Count("id", filter=Q(status=JobStatus.QUEUED)),
        running=Count("id", filter=Q(status=JobStatus.RUNNING)),
        completed_last_hour=Count("id", filter=Q(finished__gte=hour_ago) & ~Q(status=JobStatus.CANCELLED)),
    )
    duration = (
        BenchmarkJob.objects.filter(status=JobStatus.SUCCEEDED, finished__gte=now - dt.timedelta(days=1))
        .annotate(took=F("finished") - F("started"))
        .aggregate(mean=Avg("took"))["mean"]
    )
    by_nodes: dict[tuple[str, str], dict] = {}
    done = BenchmarkJob.objects.filter(status=JobStatus.SUCCEEDED, peak_busbw__isnull=False).order_by("-finished")
    for job in done[:recent]:
        # The figure of busbw_at_largest, from the rows, as the job's page and the compare page show it.
        largest = job.busbw_largest
        if largest is None or largest["out_of_place"] is None:
            continue
        # An all_gather's busbw is not an all-reduce's: a trend compares one operation with itself.
        key = (job.op, ",".join(job.nodes))
        entry = by_nodes.get(key)
        if entry is None:
            by_nodes[key] = {"op": job.op, "nodes": key[1], "job": job.pk, "busbw": largest["out_of_place"],
                             "inplace_busbw": largest["in_place"], "size": largest["size"], "previous": None,
                             "finished": job.finished.isoformat()}
        elif entry["previous"] is None and largest["size"] == entry["size"]:  # a trend compares like sizes
            entry["previous"] = largest["out_of_place"]
    return {
        **counts,
        "mean_duration_s": duration.total_seconds() if duration else None,
        "bandwidth": list(by_nodes.values()),
    }
