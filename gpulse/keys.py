"""The Redis contract: every key gpulse reads or writes (see docs/ARCHITECTURE.md)."""

import os

DEFAULT_PREFIX = "gpulse:"
# Where every gpulse process looks for Redis when REDIS_URL is not set.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class Keys:
    """Key names under one prefix, so several installations can share a Redis."""

    def __init__(self, prefix: str | None = None):
        self.prefix = prefix if prefix is not None else os.environ.get("GPULSE_REDIS_PREFIX", DEFAULT_PREFIX)

    @property
    def telemetry_streams(self) -> str:
        """SCAN pattern of every node's telemetry stream (how ingest finds new nodes)."""
        return f"{self.prefix}telemetry:*"

    def telemetry_stream(self, name: str) -> str:
        """The node's own telemetry stream: only its collector's ACL user may write it, so a sample read
        here is the node's whatever its ``node`` field says (docs/ARCHITECTURE.md, "Node identity")."""
        return f"{self.prefix}telemetry:{name}"

    def telemetry_node(self, stream: bytes | str) -> str | None:
        """The node whose telemetry stream this key is; None for any other key."""
        text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream
        head = f"{self.prefix}telemetry:"
        return text[len(head):] if text.startswith(head) and len(text) > len(head) else None

    def probe_stream(self, name: str) -> str:
        """The node's own stream of bandwidth probe results (only its collector writes it)."""
        return f"{self.prefix}probe-results:{name}"

    def probe_history(self, name: str) -> str:
        """List of the node's latest probe results, newest first."""
        return f"{self.prefix}probes:{name}"

    def node(self, name: str) -> str:
        return f"{self.prefix}node:{name}"

    @property
    def sm_idle(self) -> str:
        """JSON {node: [GPU index]}: the GPUs ingest flags "kernels run, SMs idle" (dashboard/activity/stage.py)."""
        return f"{self.prefix}sm-idle"

    def job_events(self, job_id) -> str:
        """The job's control-side stream: only the control host (web, control workers) writes it."""
        return f"{self.prefix}job:{job_id}:events"

    def job_node_events(self, job_id, node: str) -> str:
        """The node's own stream of the job's events: only its node worker's ACL user may write it, so
        what is read here is the node's, whatever a ``node`` field in it says."""
        return f"{self.prefix}job:{job_id}:events:{node}"

    def job_cancel(self, job_id) -> str:
        """Set while the job is being cancelled (the control side's flag)."""
        return f"{self.prefix}job:{job_id}:cancel"

    def job_node_cancel(self, job_id, node: str) -> str:
        """Set, beside job_cancel, for each node of a job being cancelled; the node's task polls it."""
        return f"{self.prefix}job:{job_id}:cancel:{node}"

    def job_claim(self, job_id, node: str) -> str:
        """Set by the first delivery of a node's task, so a redelivery does not start a second copy."""
        return f"{self.prefix}job:{job_id}:claimed:{node}"

    def worker(self, node: str) -> str:
        """Set, with a short TTL, while a benchmark worker consumes the node's queue (its heartbeat)."""
        return f"{self.prefix}worker:{node}"

    @property
    def known_nodes(self) -> str:
        """Hash node -> {"ts", "interval"} of its last sample: remembers down nodes."""
        return f"{self.prefix}nodes"

    @property
    def health(self) -> str:
        """Hash node -> its health (verdict, findings with since, checked), rewritten by ingest on a change."""
        return f"{self.prefix}health"

    @property
    def idle_allocations(self) -> str:
        """GPUs allocated but idle now, with owner and since (JSON list), rewritten by ingest on a change."""
        return f"{self.prefix}usage:idle"

    def recent(self, name: str) -> str:
        """List of the node's compact recent points, newest first (live charts' backfill)."""
        return f"{self.prefix}recent:{name}"

    @property
    def snapshot(self) -> str:
        """The whole cluster as one snapshot frame, rewritten every ingest tick."""
        return f"{self.prefix}frame:snapshot"

    @property
    def ingest_heartbeat(self) -> str:
        return f"{self.prefix}ingest:heartbeat"

    def websockets(self, user_id: int) -> str:
        """Sorted set of the user's open websockets: connection id -> heartbeat deadline (unix s)."""
        return f"{self.prefix}websockets:user:{user_id}"

    def webhook_leases(self, endpoint_id: int) -> str:
        """Sorted set of the attempts in flight to one webhook endpoint, scored by lease expiry."""
        return f"{self.prefix}webhook:{endpoint_id}:leases"

    def webhook_line(self, endpoint_id: int) -> str:
        """Sorted set of the deliveries waiting for a free slot at one webhook endpoint, oldest first
        ("<notification>:<attempt>"; named apart from the line of per-transition deliveries before them)."""
        return f"{self.prefix}webhook:{endpoint_id}:waiting"

    @property
    def simulator_faults(self) -> str:
        return f"{self.prefix}simulator:faults"

    @property
    def cache_prefix(self) -> str:
        """Prefix of Django's cache keys."""
        return f"{self.prefix}cache"

    @property
    def channels_prefix(self) -> str:
        """Prefix of the Channels layer's keys and pub/sub channels."""
        return f"{self.prefix}asgi"

    @property
    def celery_prefix(self) -> str:
        """Prefix of the control host's Celery queues and bookkeeping keys (no node worker reaches them)."""
        return f"{self.prefix}celery:"

    def node_broker_prefix(self, broker: str) -> str:
        """Prefix of one node worker's Celery key space: its queue, bindings and unacked hash.

        ``broker`` is the node's name, or gpulse.redis_acl.SIMULATED_BROKER for the demo's
        one worker of every simulated node."""
        return f"{self.prefix}nodeq:{broker}:"


# Consumer group of the ingest process on the telemetry stream.
INGEST_GROUP = "ingest"

# Length cap of each node's telemetry stream. The stream is only the buffer
# between a collector and ingest (which reads it within a second), yet each
# 8-GPU entry holds ~8.5 KB with health and process owners: 120 entries are two
# minutes of a node at 1 Hz, as the one shared stream held before (at 300, the
# load test's Redis bound at 1,000 nodes was 2.9 GB instead of 1.2). Ingest
# holds entries unacknowledged until their usage is written (a minute), well
# inside it. The collector asks for it on every XADD and ingest trims each
# stream to it as it reads, so a node that leaves the cap out floods only its
# own stream, and not for long.
TELEMETRY_MAXLEN = 120
# Probe results per node's stream: ingest reads them within a second.
PROBES_MAXLEN = 100
JOB_EVENTS_MAXLEN = 10_000
PROBE_HISTORY = 100
# Points kept per node for the live charts: 15 minutes at 1 Hz.
RECENT_POINTS = 900


def node_ttl(interval: float) -> int:
    """Seconds a node's latest key lives: about three intervals, at least 3 s.

    Its expiry is how a dead node is noticed (docs/ARCHITECTURE.md), so it must outlast
    ordinary jitter but not much more.
    """
    return max(3, round(3 * interval))
