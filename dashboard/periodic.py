"""A daemon thread that runs one database pass every few seconds inside a Celery worker.

For passes seconds apart and cheap (the benchmark reaper, the drain sweeper, the planned-drain pass):
through beat each would be a message every few seconds, and a pass that waits a few seconds behind a
slow task on the queue is late for what it watches. Running in every worker costs little and needs no
other process alive. Passes must be safe to run in several workers at once.

The retention pass is not one of them: it can take minutes and once an interval across the cluster is
enough, so it is a Celery task that the one `celery beat` sends (dashboard/retention/tasks.py).
"""

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connections

log = logging.getLogger(__name__)


class PeriodicPass:
    def __init__(self, name: str, work: Callable[[], object], interval_s: float):
        self.name = name
        self.work = work
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gpulse-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    self.work()
                except Exception:  # the database or Redis away: the next pass tries again
                    log.exception("%s pass failed", self.name)
                finally:
                    close_old_connections()  # as after a request: drop a broken or expired connection
        finally:
            connections.close_all()  # this thread's own connections

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
