"""Node-worker heartbeats, the contract: `gpulse:worker:<node>` exists while a
benchmark worker consumes the node's queue.

The node worker writes the key (workers/heartbeat.py); the control side reads
it. A launch on a node without one is refused at once (its task would wait in
the queue until the job's time limit), and a running job whose node lost its
worker ends without waiting for that limit. The key expires by itself when the
worker dies, so no clock of two machines is ever compared.
"""

import redis

from gpulse.keys import Keys

# A beat every 3 s with a 10 s TTL: a busy Redis may delay one or two beats,
# and a dead worker is noticed within 10 s.
INTERVAL_S = 3
TTL_S = 10


def workerless(client: redis.Redis, keys: Keys, nodes: list[str]) -> list[str]:
    """Return the nodes among ``nodes`` that have no live benchmark worker, in order."""
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.exists(keys.worker(node))
    return [node for node, alive in zip(nodes, pipe.execute(), strict=True) if not alive]
