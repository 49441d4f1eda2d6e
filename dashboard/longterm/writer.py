"""The remote-write sender: a thread of its own, so a slow or unreachable store never holds ingest back.

Ingest hands it a round (the cluster's nodes at one moment) and goes on: ``offer`` only appends to a short
queue. The thread encodes each round into batches (encoding.py), keeps them in a buffer bounded in samples,
and sends the oldest first. A failure (no answer, a 5xx, a 429) keeps the batch and retries it after an
exponential backoff; while the store is away new rounds still join the buffer, and past its bound the oldest
batches go first, counted as dropped. A 4xx (or a redirect, which is never followed) means the store refuses
the batch as it is: it is dropped, counted as rejected, and logged, as Prometheus does.

Counted, for ingest's heartbeat and /metrics: samples sent, failed (each failed attempt's samples; they are
retried), dropped and rejected; rounds skipped (the encoder fell so far behind that the queue overflowed).
"""

import http.client
import logging
import random
import threading
import time
from collections import deque

from dashboard.longterm.encoding import Batch, LabelCache, encode_round
from dashboard.longterm.metrics import OUTCOMES
from dashboard.longterm.store import StoreURL, connect
from gpulse.ratelog import RateLimitedLog

log = logging.getLogger("gpulse.remote_write")

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
# Of a store's answer, what is read (an error message) at most.
ANSWER_LIMIT = 64 * 1024
BACKOFF_BASE = 1.0
BACKOFF_MAX = 30.0


class RemoteWriter:
    def __init__(self, url: StoreURL, *, headers: dict[str, str], timeout: float, max_samples: int,
                 max_rounds_waiting: int = 4, backoff_base: float = BACKOFF_BASE,
                 backoff_max: float = BACKOFF_MAX):
        self.url = url
        self.headers = {**headers, **HEADERS}
        self.timeout = timeout
        self.max_samples = max_samples
        self.max_rounds_waiting = max_rounds_waiting
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.cache = LabelCache()
        self.rounds: deque[tuple[int, list[dict]]] = deque()
        self.batches: deque[Batch] = deque()
        self.buffered_samples = 0
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.skipped_rounds = 0
        self.failures_in_a_row = 0
        self.retry_at = 0.0
        self.last_error: str | None = None
        self.errors = RateLimitedLog(log, limit=2)
        self.connection: http.client.HTTPConnection | None = None
        self.wake = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="gpulse-remote-write", daemon=True)

    # -- ingest's side: never waits on the store ------------------------------------------------------------------

    def offer(self, timestamp_ms: int, nodes: list[dict]) -> None:
        """Queue one round; past max_rounds_waiting the oldest waiting round is skipped (and counted)."""
        with self.wake:
            if not self.thread.is_alive() and not self.stopping:
                self.thread.start()
            if len(self.rounds) >= self.max_rounds_waiting:
                self.rounds.popleft()
                self.skipped_rounds += 1
            self.rounds.append((timestamp_ms, nodes))
            self.wake.notify()

    def stats(self) -> dict:
        return {**self.counts, "skipped_rounds": self.skipped_rounds, "buffered_samples": self.buffered_samples,
                "error": self.last_error}

    def stop(self, timeout: float = 5.0) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        if self.thread.is_alive():
            self.thread.join(timeout)

    # -- the sender's thread ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.wake:
                while not self.stopping and not self.rounds and not self._may_send():
                    self.wake.wait(max(self.retry_at - time.monotonic(), 0.01) if self.batches else None)
                if self.stopping:
                    break
                rounds, self.rounds = self.rounds, deque()
            for timestamp_ms, nodes in rounds:
                self._encode(timestamp_ms, nodes)
            if self._may_send():
                self._send_oldest()
        if self.connection is not None:
            self.connection.close()

    def _may_send(self) -> bool:
        return bool(self.batches) and time.monotonic() >= self.retry_at

    def _encode(self, timestamp_ms: int, nodes: list[dict]) -> None:
        try:
            batches = encode_round(nodes, timestamp_ms, self.cache)
        except Exception:  # a bug, not the store: this round is lost, the next ones go on
            log.exception("remote write: a round could not be encoded")
            self.skipped_rounds += 1
            return
        for batch in batches:
            self.batches.append(batch)
            self.buffered_samples += batch.samples
        while self.buffered_samples > self.max_samples:
            oldest = self.batches.popleft()
            self.buffered_samples -= oldest.samples
            self.counts["dropped"] += oldest.samples

    def _send_oldest(self) -> None:
        batch = self.batches[0]
        try:
            status, answer = self._post(batch.body)
        except Exception as exc:  # no answer, or a request http.client refuses to make (a header with a newline)
            self._retry(batch, f"{type(exc).__name__}: {exc}")
            return
        if 200 <= status < 300:
            self._done(batch, "sent")
            if self.failures_in_a_row:
                log.info("remote write to %s works again after %d failed attempts", self.url.shown,
                         self.failures_in_a_row)
            self.failures_in_a_row, self.retry_at, self.last_error = 0, 0.0, None
        elif status == 429 or status >= 500:
            self._retry(batch, f"HTTP {status}: {answer}")
        else:
            why = "redirects are not followed" if 300 <= status < 400 else answer
            self.last_error = f"HTTP {status}: {why}"
            self.errors.log(logging.ERROR, "remote write to %s: the store refused %d samples (%s); dropped",
                            self.url.shown, batch.samples, self.last_error)
            self._done(batch, "rejected")

    def _done(self, batch: Batch, outcome: str) -> None:
        self.batches.popleft()
        self.buffered_samples -= batch.samples
        self.counts[outcome] += batch.samples

    def _retry(self, batch: Batch, error: str) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        self.counts["failed"] += batch.samples
        self.failures_in_a_row += 1
        wait = min(self.backoff_base * 2 ** (self.failures_in_a_row - 1), self.backoff_max)
        wait *= random.uniform(0.5, 1.0)  # writers restarted together do not retry together
        self.retry_at = time.monotonic() + wait
        self.last_error = error
        self.errors.warning("remote write to %s failed (%s); %d samples buffered, retrying in %.1f s",
                            self.url.shown, error, self.buffered_samples, wait)

    def _post(self, body: bytes) -> tuple[int, str]:
        if self.connection is None:
            self.connection = connect(self.url, self.timeout)
        self.connection.request("POST", self.url.path or "/", body=body, headers=self.headers)
        response = self.connection.getresponse()
        answer = response.read(ANSWER_LIMIT)
        if response.will_close or not response.isclosed():  # an answer longer than we read ends the connection
            self.connection.close()
            self.connection = None
        return response.status, answer[:300].decode(errors="replace").strip()
