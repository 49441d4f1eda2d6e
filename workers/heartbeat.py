"""The node worker's heartbeat thread: it keeps `gpulse:worker:<node>` alive
for each node whose queue the worker consumes (the contract: gpulse/heartbeat.py)."""

import json
import logging
import os
import socket
import threading
import time

import redis

from gpulse.heartbeat import INTERVAL_S, TTL_S
from gpulse.keys import Keys

log = logging.getLogger(__name__)


class Heartbeat:
    """A daemon thread that keeps the keys of ``nodes`` alive until stopped."""

    def __init__(self, client: redis.Redis, nodes: list[str], keys: Keys | None = None):
        self.client = client
        self.nodes = nodes
        self.keys = keys or Keys()
        self.value = json.dumps({"hostname": socket.gethostname(), "pid": os.getpid(), "since": time.time()})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpulse-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pipe = self.client.pipeline(transaction=False)
                for node in self.nodes:
                    pipe.set(self.keys.worker(node), self.value, ex=TTL_S)
                pipe.execute()
            except redis.RedisError as exc:  # Redis away: the next beat tries again
                log.warning("heartbeat of %s not written: %s", ", ".join(self.nodes), exc)
            self._stop.wait(INTERVAL_S)

    def stop(self) -> None:
        """Stop beating and remove the keys: a stopped worker takes no more jobs."""
        self._stop.set()
        self._thread.join(INTERVAL_S)
        try:
            self.client.delete(*(self.keys.worker(node) for node in self.nodes))
        except redis.RedisError as exc:
            log.warning("heartbeat of %s not removed (it expires in %s s): %s", ", ".join(self.nodes), TTL_S, exc)
        self.client.close()
