"""The job events stream `gpulse:job:<id>:events`: what node tasks, the control
side and browsers say to each other about one benchmark job.

Each entry has one field `e`, a JSON object with a `kind`:
  row        {"kind": "row", "row": {size, count, type, redop, time_us, algbw, busbw, wrong, inplace}}
  started    {"kind": "started", "node"}   (the node's task began: it is not silent, only slow)
  node_done  {"kind": "node_done", "node", "node_rank", "status", "reason", "crashed", "result"}
             (crashed: one of its ranks died without a word, the likely cause of a failure)
  final      {"kind": "final", "status", "reason"}   (written once the job is recorded)
"""

import json

import redis

from gpulse.keys import JOB_EVENTS_MAXLEN, Keys

# Events outlive the job by a day: long enough to open a finished job's page.
EVENTS_TTL = 86400


def emit(client: redis.Redis, keys: Keys, job_id, event: dict) -> None:
    stream = keys.job_events(job_id)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(stream, {"e": json.dumps(event)}, maxlen=JOB_EVENTS_MAXLEN, approximate=True)
    pipe.expire(stream, EVENTS_TTL)
    pipe.execute()


def read(
    client: redis.Redis, keys: Keys, job_id, after: str = "0-0", block_ms: int | None = None
) -> list[tuple[str, dict]]:
    """Return (entry id, event) pairs after ``after``, waiting up to block_ms for the first."""
    reply = client.xread({keys.job_events(job_id): after}, block=block_ms, count=1000)
    if not reply:
        return []
    return [(entry_id.decode(), json.loads(fields[b"e"])) for entry_id, fields in reply[0][1]]


def history(client: redis.Redis, keys: Keys, job_id) -> list[tuple[str, dict]]:
    """Return every (entry id, event) pair of the job so far, oldest first."""
    entries = client.xrange(keys.job_events(job_id))
    return [(entry_id.decode(), json.loads(fields[b"e"])) for entry_id, fields in entries]
