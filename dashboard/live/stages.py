"""The interface a feature implements to ride on ingest, and how ingest finds the stages.

Ingest's core reads the telemetry streams, checks each sample against the
contract, keeps every node's newest sample and sends one frame per tick. Every
feature (minute rollups and usage, node health, probes, idle allocations, alert
evaluation, incidents, the overview's counters) is a Stage: a class named by dotted path in
settings.GPULSE_INGEST_STAGES, made once per ingest as ``Stage(core)``, so a
sharded ingest runs one set per shard and nothing is global. A stage left out of
the setting is simply not run; the core and the other stages go on.

Each tick, in the settings' order: ``tick()`` before the frame, the frame (with
each stage's ``node_fields()``, ``gpu_flags()`` and ``summary()``), then
``write_redis()`` in the frame's pipeline, ``after_frame()``, and
``write_database()``, one stage after the other (a database error stops the
tick's database work, which is retried with backoff; any other error in one
stage is logged and counted, and the next stage runs).

Stream entries are acknowledged after a tick's database work once every stage
is ``durable()``: a stage that keeps what entries feed in memory (the rollups)
says so until it is written, and ``holding()`` says for how long at most, so
another ingest does not take the entries over meanwhile.

Stages reach each other only through ``core.board``: what a stage offers
later ones, by name. The names in use:

- ``"health"``: node name -> its NodeHealth (dashboard/health), as of this tick;
- ``"probe_busbw"``: a function returning node name -> its newest probe busbw (GB/s).
"""

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from redis.client import Pipeline

    from dashboard.live.ingest import Ingest
    from dashboard.live.state import NodeState


class Stage:
    """A feature riding on ingest. Every hook is optional: the base does nothing.

    ``core`` offers ``redis`` (the client), ``keys`` (gpulse.keys.Keys),
    ``state`` (the ClusterState: every node's newest sample and status) and
    ``board``; a stage reads them and keeps its own state on itself.
    """

    def __init__(self, core: "Ingest"):
        self.core = core

    def restore(self) -> None:
        """Ingest started (or Redis came back) knowing ``core.state.nodes`` from Redis: resume what this
        stage keeps there."""

    def follow(self, names: list[str]) -> None:
        """The streams of these nodes were found for the first time."""

    def entry(self, sample: dict, entry_id: bytes | None) -> None:
        """A sample was counted from stream entry ``entry_id``, newest or not (a backlog, a late entry):
        its ``ts`` placed on ingest's clock and its ``interval`` the time counted for it
        (dashboard.live.identity.CountedTime)."""

    def sample(self, node: "NodeState", rows: list) -> None:
        """The node's newest sample was taken in; ``rows`` are its frame rows (gpulse flags included)."""

    def tick(self, now: float, changed: list[str]) -> Iterable[str]:
        """Before the frame. ``changed``: the nodes whose status changed, and what earlier stages returned.
        Return the nodes whose node_fields() changed."""
        return ()

    def node_fields(self, name: str) -> dict:
        """Keys this stage adds to the node's frame entry (dashboard/live/frames.py)."""
        return {}

    def gpu_flags(self) -> dict[str, dict[int, int]]:
        """Node name -> GPU index -> flag bits (frames.FLAG_*) this stage sets on the GPU's row."""
        return {}

    def summary(self) -> dict:
        """Keys this stage adds to every frame's ``summary`` (the overview's counters)."""
        return {}

    def write_redis(self, pipe: "Pipeline") -> None:
        """Queue this tick's Redis writes on ``pipe`` (sent once the frame is out)."""

    def after_frame(self) -> None:
        """The tick's frame is out: work that must not delay it, and must not wait for the database."""

    def write_database(self, now: float) -> None:
        """This tick's database work, after the frame. Raise on failure: what was not written stays
        in memory for the next try."""

    def flush(self) -> None:
        """Write everything held now (ingest is stopping). Raise on failure."""

    def durable(self) -> bool:
        """Whether what every entry read so far feeds is written: ingest acknowledges them only then."""
        return True

    def holding(self) -> float:
        """Seconds at most an entry read waits before durable() says so."""
        return 0.0

    def forget(self, name: str, pipe: "Pipeline") -> None:
        """The node was pruned (down for GPULSE_NODE_FORGET_AFTER): drop it, queue deleting its keys on ``pipe``."""

    def heartbeat(self, beat: dict) -> None:
        """Add to (or count into) ingest's heartbeat, which /healthz and /metrics read."""


def load_stages(core: "Ingest", stages: Iterable | None = None) -> list[Stage]:
    """Make the stages ``stages`` names, in that order: dotted paths of Stage classes, or callables that
    make one from ``core`` (default: settings.GPULSE_INGEST_STAGES)."""
    made = []
    for stage in settings.GPULSE_INGEST_STAGES if stages is None else stages:
        if isinstance(stage, str):
            try:
                stage = import_string(stage)
            except ImportError as exc:
                raise ImproperlyConfigured(f"GPULSE_INGEST_STAGES names {stage!r}, which is not a class: {exc}") \
                    from None
        made.append(stage(core))
    return made


def overriding(stages: list[Stage], hook: str) -> list[Stage]:
    """The stages that implement ``hook``: the per-sample and per-node loops skip the others."""
    return [stage for stage in stages if getattr(type(stage), hook) is not getattr(Stage, hook)]
