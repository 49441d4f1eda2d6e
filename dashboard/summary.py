"""Cluster-wide counters the overview header shows next to the GPU numbers.

Ingest puts them into every frame. They come from the alerts and benchmarks
apps, so they are composed here, outside the live app, which knows neither.
"""

import logging
import time
from typing import Any

from dashboard.alerts.evaluate import firing_count
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.benchmarks.throughput import job_throughput
from dashboard.usage.prices import Prices, current_prices

log = logging.getLogger(__name__)

# Job throughput changes with finished jobs, not every tick: refresh it this often.
THROUGHPUT_EVERY = 10.0
_throughput: dict[str, Any] = {"at": 0.0, "value": {}}


def throughput_summary() -> dict:
    now = time.monotonic()
    if now - _throughput["at"] >= THROUGHPUT_EVERY:
        figures = job_throughput(recent=20)
        latest = figures["bandwidth"][0] if figures["bandwidth"] else None
        _throughput["value"] = {
            "jobs_last_hour": figures["completed_last_hour"],
            "job_mean_s": figures["mean_duration_s"],
            # {"nodes", "job", "busbw" (out-of-place), "inplace_busbw", "size", "previous", "finished"}
            "latest_busbw": latest,
        }
        _throughput["at"] = now
    return _throughput["value"]


# Prices change in the admin, rarely: read them this often.
PRICES_EVERY = 60.0
_prices: dict[str, Any] = {"at": -PRICES_EVERY, "value": None}


def prices() -> Prices:
    now = time.monotonic()
    if now - _prices["at"] >= PRICES_EVERY:
        _prices["value"], _prices["at"] = current_prices(), now
    return _prices["value"]


def idle_summary(idle_by_model: dict[str, int]) -> dict:
    """The KPI "allocated but idle: N GPUs, $X/h"."""
    price = prices()
    return {"gpus": sum(idle_by_model.values()),
            "usd_per_hour": sum(count * price.gpu_hour(model) for model, count in idle_by_model.items())}


def cluster_summary(idle_by_model: dict[str, int] | None) -> dict:
    """Return firing alerts, benchmark jobs by state, job throughput and the idle allocations' cost;
    never raise into ingest. ``idle_by_model``: GPUs allocated but idle now, per GPU model; None
    while usage accounting is off (the KPI shows a dash)."""
    try:
        jobs = BenchmarkJob.objects.active_counts()
        return {"alerts_firing": firing_count(), "jobs_running": jobs["running"], "jobs_queued": jobs["queued"],
                "idle_allocated": None if idle_by_model is None else idle_summary(idle_by_model),
                **throughput_summary()}
    except Exception as exc:  # a locked or unreachable database must not stop frames
        log.warning("cluster summary unavailable: %s", exc)
        return {}
