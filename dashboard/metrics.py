"""/metrics: the cluster's latest readings in Prometheus exposition format.

Each scrape reads the cluster from Redis (read_cluster()) and the job and
alert counts from the database through a collector on a fresh registry, so
nothing is cached between scrapes and no process-global state is exported.

Only current readings are exported: a node that is stale or down exports no
GPU gauges (its last values are not current, and Prometheus would store
them as if they were), and a reading the GPU does not report is left out,
never exported as 0. Node status is always exported.

Node health (dashboard/health/node_health.py): ``gpulse_node_health`` is the
verdict's level (0 healthy, 1 degraded, 2 failing), absent while a node has no
verdict (down, or no health checks): "unknown" is no number to compare, as a
null reading is left out. ``gpulse_health_check`` is 1 for each finding
(node, gpu, check, status; gpu "" for a node or cluster check) and absent
otherwise, so its series are bounded by what is wrong, not by GPUs × checks.

Usage (gpulse/usage.py): ``gpulse_gpu_allocated`` and ``gpulse_gpu_busy``
(allocated and its SM activity at or above GPULSE_BUSY_SM_ACTIVITY where reported,
else its utilization at or above GPULSE_BUSY_UTIL; absent while allocated without
either) carry the GPU's current owner as ``user`` and ``job`` labels: one
series per GPU at a time, a new one when its owner changes.
"""

import logging

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError
from django.db.models import Count
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from dashboard.accounts.metrics_token import presents_metrics_token
from dashboard.alerts.evaluate import firing_count
from dashboard.alerts.models import STATUSES, Transition
from dashboard.benchmarks.models import BenchmarkJob
from dashboard.health.node_health import NodeHealth
from dashboard.health.reading import read_health
from dashboard.healthz.checks import read_heartbeat
from dashboard.live.cluster import read_cluster
from dashboard.longterm.metrics import remote_write_families
from dashboard.mig_metrics import MIG_NAMES, mig_families
from dashboard.reliability.metrics import reliability_families
from gpulse.health import VERDICT_LEVEL
from gpulse.job_status import JobStatus
from gpulse.schema import ACTIVITY_METRICS, GPU_METRICS
from gpulse.status import NODE_STATUSES, UP
from gpulse.throttle import THROTTLE_REASONS
from gpulse.usage import is_allocated, is_idle_allocated, owner

log = logging.getLogger(__name__)

GPU_LABELS = ["node", "gpu", "uuid", "model"]
# Node sets whose latest busbw is exported: bounds the series a scrape carries.
BUSBW_JOBS_SCANNED = 200
GB = 1e9  # nccl-tests' GB/s are decimal


def _ratio(percent: float) -> float:
    return percent / 100  # a division: 97 / 100 is 0.97, 97 * 0.01 is not


def _hertz(mhz: float) -> float:
    return mhz * 1e6


def _as_is(value: float) -> float:
    return value


# sample field -> (exported name, conversion from the sample's unit, exported
# unit). Prometheus wants base units: ratios 0-1 rather than percent, hertz
# rather than MHz; the help text is the schema's description and the unit.
GPU_GAUGES = {
    "util": ("gpulse_gpu_utilization_ratio", _ratio, "ratio 0-1"),
    "mem_util": ("gpulse_gpu_memory_utilization_ratio", _ratio, "ratio 0-1"),
    "mem_used": ("gpulse_gpu_memory_used_bytes", _as_is, "bytes"),
    "mem_total": ("gpulse_gpu_memory_total_bytes", _as_is, "bytes"),
    "temp": ("gpulse_gpu_temperature_celsius", _as_is, "°C"),
    "power": ("gpulse_gpu_power_watts", _as_is, "W"),
    "power_limit": ("gpulse_gpu_power_limit_watts", _as_is, "W"),
    "sm_clock": ("gpulse_gpu_sm_clock_hertz", _hertz, "Hz"),
    "mem_clock": ("gpulse_gpu_memory_clock_hertz", _hertz, "Hz"),
    "fan": ("gpulse_gpu_fan_speed_ratio", _ratio, "ratio 0-1"),
    "pcie_tx": ("gpulse_gpu_pcie_tx_bytes_per_second", _as_is, "bytes/s"),
    "pcie_rx": ("gpulse_gpu_pcie_rx_bytes_per_second", _as_is, "bytes/s"),
    "nvlink_tx": ("gpulse_gpu_nvlink_tx_bytes_per_second", _as_is, "bytes/s"),
    "nvlink_rx": ("gpulse_gpu_nvlink_rx_bytes_per_second", _as_is, "bytes/s"),
    # GPM and DCGM profiling activity, ratios already (gpulse_gpu_sm_active_ratio is dcgm-exporter's
    # DCGM_FI_PROF_SM_ACTIVE); absent on a GPU without GPM, never 0.
    **{metric.name: (f"gpulse_gpu_{metric.name}_ratio", _as_is, "ratio 0-1") for metric in ACTIVITY_METRICS},
}
# The volatile uncorrected ECC count only grows, until the driver reloads and
# it starts again at 0: exactly a Prometheus counter's contract (a reset is a
# restart, which rate() and increase() allow for), as dcgm-exporter exports
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL.
ECC_COUNTER = "gpulse_gpu_ecc_uncorrected_errors"
# NVML's total energy since the driver loaded (mJ), exported in joules: a counter for the same reason.
ENERGY_COUNTER = "gpulse_gpu_energy_joules"
_DESCRIPTIONS = {metric.name: metric.description for metric in (*GPU_METRICS, *ACTIVITY_METRICS)}
OTHER_METRICS = (
    "gpulse_gpu_lost",
    "gpulse_gpu_allocated",
    "gpulse_gpu_busy",
    "gpulse_gpu_throttle_reason",
    "gpulse_node_up",
    "gpulse_node_status",
    "gpulse_node_last_sample_timestamp_seconds",
    "gpulse_node_twin_collectors",
    "gpulse_node_health",
    "gpulse_health_check",
    "gpulse_benchmark_jobs",
    "gpulse_benchmark_last_busbw_bytes_per_second",
    "gpulse_alerts_firing",
    "gpulse_alert_transitions_total",
    "gpulse_ingest_rejected_entries_total",
    "gpulse_ingest_nulled_readings_total",
    "gpulse_ingest_twin_dropped_samples_total",
    "gpulse_alert_evaluation_ok",
    "gpulse_alert_proposals_failed_total",
    "gpulse_incidents_total",
    "gpulse_node_mtbf_seconds",
    "gpulse_remote_write_samples_total",
    "gpulse_remote_write_rounds_skipped_total",
    "gpulse_remote_write_buffered_samples",
)
# Every series name /metrics can export (the Grafana dashboard's test checks against it).
EXPORTED_NAMES = (frozenset(name for name, _, _ in GPU_GAUGES.values())
                  | {f"{ECC_COUNTER}_total", f"{ENERGY_COUNTER}_total"} | frozenset(OTHER_METRICS) | MIG_NAMES)


def gpu_families(nodes: list[dict], busy_util: float, busy_sm_activity: float):
    gauges = {field: GaugeMetricFamily(name, f"{_DESCRIPTIONS[field]} ({unit})", labels=GPU_LABELS)
              for field, (name, _, unit) in GPU_GAUGES.items()}
    ecc = CounterMetricFamily(ECC_COUNTER, f"{_DESCRIPTIONS['ecc_uncorrected']}; restarts at 0 when the driver reloads",
                              labels=GPU_LABELS)
    lost = GaugeMetricFamily("gpulse_gpu_lost", "1 when the GPU fell off the bus (NVML GPU_IS_LOST, XID 79)",
                             labels=GPU_LABELS)
    throttle = GaugeMetricFamily("gpulse_gpu_throttle_reason", "1 while this clock throttle reason is active",
                                 labels=[*GPU_LABELS, "reason"])
    energy = CounterMetricFamily(ENERGY_COUNTER, "energy used since the driver was loaded (J); restarts at 0 when "
                                 "the driver reloads", labels=GPU_LABELS)
    allocated = GaugeMetricFamily("gpulse_gpu_allocated", "1 while a process or a Kubernetes pod holds the GPU; "
                                  "user and job: its owner's (\"\" where unknown)", labels=[*GPU_LABELS, "user", "job"])
    busy = GaugeMetricFamily("gpulse_gpu_busy", f"1 while allocated and its SM activity is at or above "
                             f"{busy_sm_activity:g} % (GPULSE_BUSY_SM_ACTIVITY) where reported, else its utilization "
                             f"at or above {busy_util:g} % (GPULSE_BUSY_UTIL); user and job: its owner's",
                             labels=[*GPU_LABELS, "user", "job"])
    for node in nodes:
        if node["status"] != UP:
            continue
        for gpu in node["gpus"]:
            labels = [node["node"], str(gpu["index"]), gpu.get("uuid") or "", gpu.get("name") or ""]
            for field, family in gauges.items():
                value = gpu.get(field)
                if value is not None:
                    family.add_metric(labels, GPU_GAUGES[field][1](value))
            if gpu.get("ecc_uncorrected") is not None:
                ecc.add_metric(labels, gpu["ecc_uncorrected"])
            lost.add_metric(labels, 1 if gpu.get("lost") else 0)
            reasons = gpu.get("throttle")
            if reasons is not None:
                for reason in THROTTLE_REASONS:
                    throttle.add_metric([*labels, reason], 1 if reason in reasons else 0)
            if gpu.get("energy") is not None:
                energy.add_metric(labels, gpu["energy"] / 1000)
            if gpu.get("lost"):
                continue  # no readings, no processes: whether it is held is unknown
            idle = is_idle_allocated(gpu, busy_util, busy_sm_activity)
            held = is_allocated(gpu)
            by = [*labels, *owner(gpu)[:2]]
            allocated.add_metric(by, 1 if held else 0)
            if idle is not None:
                busy.add_metric(by, 1 if held and not idle else 0)
    yield from gauges.values()
    yield from (ecc, lost, throttle, energy, allocated, busy)


def node_families(nodes: list[dict]):
    up = GaugeMetricFamily("gpulse_node_up", "1 while the node's collector reports on time", labels=["node"])
    status = GaugeMetricFamily(
        "gpulse_node_status", "the node's status, one-hot: up, stale (samples late) or down (latest sample expired)",
        labels=["node", "status"],
    )
    last = GaugeMetricFamily("gpulse_node_last_sample_timestamp_seconds",
                             "Unix time of the node's latest sample", labels=["node"])
    twin = GaugeMetricFamily("gpulse_node_twin_collectors",
                             "1 while a second collector reports as the node (only one's samples count), else 0",
                             labels=["node"])
    for node in nodes:
        name = node["node"]
        up.add_metric([name], 1 if node["status"] == UP else 0)
        twin.add_metric([name], 0 if node.get("twin_collectors") is None else 1)
        for each in NODE_STATUSES:
            status.add_metric([name, each], 1 if node["status"] == each else 0)
        if node["ts"] is not None:
            last.add_metric([name], node["ts"])
    yield from (up, status, last, twin)


def health_families(nodes: dict[str, NodeHealth]):
    verdict = GaugeMetricFamily(
        "gpulse_node_health", "the node's health verdict: 0 healthy, 1 degraded, 2 failing (absent: unknown)",
        labels=["node"],
    )
    checks = GaugeMetricFamily(
        "gpulse_health_check", "1 for each health check finding (warn, fail or unknown) of the node or GPU",
        labels=["node", "gpu", "check", "status"],
    )
    for name, node in nodes.items():
        level = VERDICT_LEVEL.get(node.verdict)
        if level is None:
            continue
        verdict.add_metric([name], level)
        for check, gpu, status in node.findings:
            checks.add_metric([name, "" if gpu is None else str(gpu), check, status], 1)
    yield from (verdict, checks)


def benchmark_families():
    counts = dict(BenchmarkJob.objects.values_list("status").annotate(n=Count("id")))
    jobs = GaugeMetricFamily("gpulse_benchmark_jobs", "benchmark jobs by status", labels=["status"])
    for status in JobStatus:
        jobs.add_metric([status], counts.get(status, 0))
    yield jobs
    busbw = GaugeMetricFamily(
        "gpulse_benchmark_last_busbw_bytes_per_second",
        "average bus bandwidth (nccl-tests' '# Avg bus bandwidth', GB/s) of the latest successful job per node set",
        labels=["nodes"],
    )
    latest = (BenchmarkJob.objects.filter(status=JobStatus.SUCCEEDED, avg_busbw__isnull=False)
              .order_by("-finished").values_list("nodes", "avg_busbw")[:BUSBW_JOBS_SCANNED])
    seen = set()
    for nodes, value in latest:
        key = ",".join(nodes)
        if key not in seen:
            seen.add(key)
            busbw.add_metric([key], value * GB)
    yield busbw


def alert_families():
    yield GaugeMetricFamily("gpulse_alerts_firing", "alerts firing now", value=firing_count())
    transitions = CounterMetricFamily("gpulse_alert_transitions", "alert state changes recorded, by new status",
                                      labels=["to"])
    counts = dict(Transition.objects.values_list("new").annotate(n=Count("id")))
    for status in STATUSES:
        transitions.add_metric([status], counts.get(status, 0))
    yield transitions


def ingest_families():
    """Ingest's own counters, from its heartbeat (they restart at zero with ingest, as counters may)."""
    beat = read_heartbeat()
    if beat is None:
        return
    rejected = CounterMetricFamily("gpulse_ingest_rejected_entries", "telemetry entries the sample contract rejected")
    rejected.add_metric([], beat.get("rejected", 0))
    yield rejected
    nulled = CounterMetricFamily("gpulse_ingest_nulled_readings",
                                 "readings outside their documented range (or NaN), stored as null")
    nulled.add_metric([], beat.get("nulled", 0))
    yield nulled
    twin_dropped = CounterMetricFamily("gpulse_ingest_twin_dropped_samples",
                                       "samples of a second collector reporting as a node, dropped (not summed)")
    twin_dropped.add_metric([], beat.get("twin_dropped", 0))
    yield twin_dropped
    rollups = beat.get("rollups")
    if rollups is not None:  # dropped at GPULSE_ROLLUP_MAX_ROWS while the database was down: history is short
        for name, key, what in (("gpulse_ingest_lost_samples", "lost_samples", "rollups"),
                                ("gpulse_ingest_lost_usage_samples", "lost_usage_samples", "usage accounting")):
            lost = CounterMetricFamily(name, f"GPU samples dropped from the {what} during a database outage")
            lost.add_metric([], rollups.get(key, 0))
            yield lost
    alerts = beat.get("alerts")
    if alerts is not None:
        yield GaugeMetricFamily("gpulse_alert_evaluation_ok", "1 while ingest's alert evaluation runs through",
                                value=1 if alerts["ok"] else 0)
        failed = CounterMetricFamily("gpulse_alert_proposals_failed",
                                     "alert changes that could not be committed, even on their own")
        failed.add_metric([], alerts["proposals_failed"])
        yield failed


class ClusterCollector:
    """Everything /metrics exports, read at scrape time."""

    def collect(self):
        nodes = read_cluster()
        yield from gpu_families(nodes, settings.GPULSE_BUSY_UTIL, settings.GPULSE_BUSY_SM_ACTIVITY)
        yield from mig_families(nodes)
        yield from node_families(nodes)
        yield from health_families(read_health())
        yield from benchmark_families()
        yield from alert_families()
        yield from ingest_families()
        yield from reliability_families()
        yield from remote_write_families(read_heartbeat())


@login_not_required  # Prometheus has no session: the view checks the token itself
@require_GET
def metrics_view(request):
    if not (presents_metrics_token(request) or request.user.is_authenticated):
        if settings.GPULSE_METRICS_TOKEN:
            how = "Authorization: Bearer <GPULSE_METRICS_TOKEN>"
        else:
            how = "a session or API token"
        return HttpResponse(f"authentication required: {how}\n", status=401, content_type="text/plain",
                            headers={"WWW-Authenticate": 'Bearer realm="gpulse"'})
    registry = CollectorRegistry()
    registry.register(ClusterCollector())
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    try:
        body = encoder(registry)
    except (redis.RedisError, DatabaseError) as exc:
        # A failed scrape (Prometheus' up == 0) rather than a partial one that looks healthy.
        log.warning("/metrics: %s", exc)
        return HttpResponse(f"gpulse metrics unavailable: {exc}\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=content_type)
