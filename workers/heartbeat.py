"""Node-worker heartbeats: `gpulse:worker:<node>` exists while a benchmark worker
consumes the node's queue.

A launch on a node without one is refused at once (its task would wait in the
queue until the job's time limit), and a running job whose node lost its
worker ends without waiting for that limit. The key expires by itself when the
worker dies, so no clock of two machines is ever compared.
"""

import json
import logging
import os
import socket
import threading
import time

import redis

from gpulse.keys import Keys

log = logging.getLogger(__name__)

# A beat every 3 s with a 10 s TTL: a busy Redis may delay one or two beats,
# and a dead worker is noticed within 10 s.
INTERVAL_S = 3
TTL_S = 10


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


def workerless(client: redis.Redis, keys: Keys, nodes: list[str]) -> list[str]:
    """Return the nodes among ``nodes`` that have no live benchmark worker, in order."""
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.exists(keys.worker(node))
    return [node for node, alive in zip(nodes, pipe.execute(), strict=True) if not alive]
