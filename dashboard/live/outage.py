"""Ingest's view of the database: up, or down since when and why, and when to try again.

Ingest never exits on a database error: it closes the connection (the next
query opens a new one), keeps what it has not written, and retries with
backoff; the heartbeat carries describe() so /healthz names the outage.
"""

import contextlib
import logging

from django.db import Error, connection

log = logging.getLogger("gpulse.ingest")

FIRST_RETRY = 0.5
LAST_RETRY = 5.0


class DatabaseOutage:
    def __init__(self):
        self.since: float | None = None
        self.error = ""
        self.retry_at = 0.0
        self.backoff = FIRST_RETRY

    def ready(self, now: float) -> bool:
        """Whether to use the database this tick: always when it answered, after a backoff when not."""
        return now >= self.retry_at

    def failed(self, exc: Error, now: float) -> None:
        if self.since is None:
            self.since = now
            log.error("database unreachable (%s); keeping rollups in memory and retrying", exc)
        self.error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        self.retry_at = now + self.backoff
        self.backoff = min(self.backoff * 2, LAST_RETRY)
        with contextlib.suppress(Error):  # a dead connection may fail to close too
            connection.close()

    def recovered(self, now: float) -> None:
        if self.since is not None:
            log.info("database is back after %.0f s", now - self.since)
        self.since = None
        self.error = ""
        self.backoff = FIRST_RETRY

    def describe(self) -> dict | None:
        return None if self.since is None else {"since": self.since, "error": self.error}
