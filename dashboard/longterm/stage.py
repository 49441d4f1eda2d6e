"""The ingest stage that feeds remote write: every GPULSE_REMOTE_WRITE_INTERVAL seconds it hands the
cluster's nodes, as ingest holds them, to the sender thread (writer.py). Inert while GPULSE_REMOTE_WRITE_URL is
unset; with a URL it cannot use, it logs why once, says so in ingest's heartbeat, and ingest goes on."""

import logging

from django.conf import settings

from dashboard.live.stages import Stage
from dashboard.longterm.store import StoreURLError, auth_headers, parse_store_url
from dashboard.longterm.writer import RemoteWriter

log = logging.getLogger("gpulse.remote_write")


def writer_from_settings() -> RemoteWriter:
    """The writer the settings describe; raise StoreURLError for a URL it cannot use."""
    url = parse_store_url(settings.GPULSE_REMOTE_WRITE_URL, "GPULSE_REMOTE_WRITE_URL")
    interval = settings.GPULSE_REMOTE_WRITE_INTERVAL
    timeout = settings.GPULSE_REMOTE_WRITE_TIMEOUT
    return RemoteWriter(url, headers=auth_headers(), timeout=timeout,
                        max_samples=settings.GPULSE_REMOTE_WRITE_BUFFER_SAMPLES,
                        # rounds that may wait while one request takes its whole timeout
                        max_rounds_waiting=max(4, int(timeout / interval) + 2))


class RemoteWriteStage(Stage):
    def __init__(self, core, writer: RemoteWriter | None = None):
        """``writer``: the sender to feed (default: the one the settings describe, none without a URL)."""
        super().__init__(core)
        self.interval = settings.GPULSE_REMOTE_WRITE_INTERVAL
        self.next_round = 0.0
        self.error: str | None = None
        self.writer = writer
        if writer is None and settings.GPULSE_REMOTE_WRITE_URL:
            try:
                self.writer = writer_from_settings()
            except StoreURLError as exc:
                self.error = f"remote write is off: {exc}"
                log.error("%s", self.error)

    def tick(self, now: float, changed: list[str]):
        if self.writer is not None and now >= self.next_round:
            started = now // self.interval * self.interval  # on the clock's grid, as every shard's rounds
            self.next_round = started + self.interval
            nodes = [{"node": node.name, "status": node.status, "ts": node.ts, "gpus": node.sample["gpus"],
                      "twin_collectors": node.identity.twin_since} for node in self.core.state.nodes.values()]
            self.writer.offer(int(started * 1000), nodes)
        return ()

    def heartbeat(self, beat: dict) -> None:
        if self.writer is not None:
            beat["remote_write"] = self.writer.stats()
        elif self.error is not None:
            beat["remote_write"] = {"error": self.error}
