"""Remote write's counters on /metrics, from ingest's heartbeat (they restart at zero with ingest)."""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# What became of each sample remote write took (writer.py counts them).
OUTCOMES = ("sent", "failed", "dropped", "rejected")


def _count(value) -> bool:
    return type(value) is int and value >= 0


def remote_write_families(beat: dict | None):
    """Nothing while remote write is off. The heartbeat lives in Redis: a value that is not a count is left out."""
    state = (beat or {}).get("remote_write")
    if not isinstance(state, dict) or not all(_count(state.get(outcome)) for outcome in OUTCOMES):
        return
    samples = CounterMetricFamily("gpulse_remote_write_samples", "samples remote write sent to the store, failed to "
                                  "send (each attempt; retried), dropped (buffer full) or had rejected (4xx)",
                                  labels=["outcome"])
    for outcome in OUTCOMES:
        samples.add_metric([outcome], state[outcome])
    yield samples
    if _count(state.get("skipped_rounds")):
        skipped = CounterMetricFamily("gpulse_remote_write_rounds_skipped",
                                      "rounds of the cluster never encoded: the sender fell that far behind")
        skipped.add_metric([], state["skipped_rounds"])
        yield skipped
    if _count(state.get("buffered_samples")):
        yield GaugeMetricFamily("gpulse_remote_write_buffered_samples", "samples waiting to be sent to the store",
                                value=state["buffered_samples"])
