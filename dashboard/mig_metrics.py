"""/metrics' MIG series: each MIG instance's memory and activity (gpulse.schema MIG_METRICS), as dcgm-exporter
labels its GPU_I_ID series.

Labels: the GPU's (node, gpu, uuid, model), ``gpu_instance`` and ``profile``
(dcgm-exporter's GPU_I_ID and GPU_I_PROFILE) and ``compute_instance`` (""
where the source names none, as dcgm-exporter's series), which tells apart
compute instances sharing a GPU instance. Exported as the GPU gauges are: only
for nodes that are up, a reading the instance does not report left out, never 0.
"""

from prometheus_client.core import GaugeMetricFamily

from gpulse.schema import ACTIVITY_METRICS, MIG_METRICS
from gpulse.status import UP

MIG_LABELS = ["node", "gpu", "uuid", "model", "gpu_instance", "compute_instance", "profile"]
# Instance reading -> (exported name, unit): bytes and ratios 0-1, as the sample has them.
MIG_GAUGES = {
    "mem_used": ("gpulse_mig_memory_used_bytes", "bytes"),
    "mem_total": ("gpulse_mig_memory_total_bytes", "bytes"),
    **{metric.name: (f"gpulse_mig_{metric.name}_ratio", "ratio 0-1") for metric in ACTIVITY_METRICS},
}
MIG_NAMES = frozenset(name for name, _ in MIG_GAUGES.values())
_DESCRIPTIONS = {metric.name: metric.description for metric in MIG_METRICS}


def _text(value) -> str:
    return "" if value is None else str(value)


def mig_families(nodes: list[dict]):
    gauges = {field: GaugeMetricFamily(name, f"{_DESCRIPTIONS[field]} ({unit})", labels=MIG_LABELS)
              for field, (name, unit) in MIG_GAUGES.items()}
    for node in nodes:
        if node["status"] != UP:
            continue
        for gpu in node["gpus"]:
            gpu_labels = [node["node"], str(gpu["index"]), gpu.get("uuid") or "", gpu.get("name") or ""]
            for instance in gpu.get("mig") or ():
                labels = [*gpu_labels, str(instance["gpu_instance"]), _text(instance.get("compute_instance")),
                          _text(instance.get("profile"))]
                for field, family in gauges.items():
                    value = instance.get(field)
                    if value is not None:
                        family.add_metric(labels, value)
    yield from gauges.values()
