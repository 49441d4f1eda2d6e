"""The ingest stage that keeps history: minute rollups of every GPU reading and the usage they carry.

Every sample ingest counts, newest or not, is queued (``entry``) and folded into
its minute after the tick's frame. Rollups are written every
GPULSE_ROLLUP_FLUSH_INTERVAL seconds and usage every GPULSE_USAGE_FLUSH_INTERVAL;
the stage reports its entries durable only once both are written, so ingest
acknowledges nothing whose minute a crash could lose (accumulator.py says how
nothing is counted twice).
"""

from django.conf import settings

from dashboard.live.stages import Stage
from dashboard.rollups.accumulator import RollupAccumulator
from gpulse.keys import INGEST_GROUP


class RollupStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.flush_interval = settings.GPULSE_ROLLUP_FLUSH_INTERVAL
        self.usage_flush_interval = settings.GPULSE_USAGE_FLUSH_INTERVAL
        self.accounting = settings.GPULSE_USAGE_ACCOUNTING
        self.accumulator = RollupAccumulator(
            core.keys.telemetry_stream, INGEST_GROUP, max_rows=settings.GPULSE_ROLLUP_MAX_ROWS,
            busy_util=core.frames.busy_util, busy_sm_activity=core.frames.busy_sm_activity,
            accounting=self.accounting,
        )
        self.next_flush = 0.0
        self.next_usage_flush = 0.0
        self.unwritten = False  # entries taken in since the last write of rollups and usage

    def entry(self, sample: dict, entry_id: bytes | None) -> None:
        self.accumulator.add(sample, entry_id)
        self.unwritten = True

    def after_frame(self) -> None:
        self.accumulator.fold_queued()

    def write_database(self, now: float) -> None:
        if now >= self.next_flush:
            usage = now >= self.next_usage_flush
            self.write(usage=usage)
            self.next_flush = now + self.flush_interval
            if usage:
                self.next_usage_flush = now + self.usage_flush_interval

    def flush(self) -> None:
        self.write()

    def write(self, usage: bool = True) -> int:
        """Write the rollups of every entry taken in so far and, with ``usage``, their usage; return
        rollup rows written."""
        written = self.accumulator.write(usage=usage)
        if usage or not self.accounting:
            self.unwritten = False
        return written

    def durable(self) -> bool:
        return not self.unwritten

    def holding(self) -> float:
        return self.flush_interval + (self.usage_flush_interval if self.accounting else 0.0)

    def forget(self, name: str, pipe) -> None:
        self.accumulator.forget(name)

    def heartbeat(self, beat: dict) -> None:
        beat["rollups"].update(
            pending_rows=self.accumulator.pending_rows(),
            lost_samples=self.accumulator.lost_samples,
            lost_usage_samples=self.accumulator.lost_usage_samples,
        )
