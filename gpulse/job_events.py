"""A benchmark job's events streams: what node tasks, the control side and
browsers say to each other about one job.

Two kinds of stream, so that who wrote an event is known from where it is:
  gpulse:job:<id>:events          the control side's (web, control workers): `final`
  gpulse:job:<id>:events:<node>   one per node, written only by that node's worker
                                  (its ACL user may write no other): `started`,
                                  `row` (rank 0's node only counts), `node_done`

Each entry has one field `e`, a JSON object with a `kind`:
  row        {"kind": "row", "row": {size, count, type, redop, time_us, algbw, busbw, wrong, inplace}}
  started    {"kind": "started", "node"}   (the node's task began: it is not silent, only slow)
  node_done  {"kind": "node_done", "node", "node_rank", "status", "reason", "crashed", "result"}
             (crashed: one of its ranks died without a word, the likely cause of a failure)
  final      {"kind": "final", "status", "reason"}   (written once the job is recorded)

A node's stream is the node's word, whatever its `node` field says: readers
take the node from the stream's key (dashboard/benchmarks/outcome.py) and
reject an entry that is not such an object.
"""

import json
from collections.abc import Iterable
from typing import NamedTuple

import redis

from gpulse.keys import JOB_EVENTS_MAXLEN, Keys

# Events outlive the job by a day: long enough to open a finished job's page.
EVENTS_TTL = 86400
# An entry's `e` past this many bytes is rejected unread (a node's row or report is under 4 KB).
MAX_EVENT_BYTES = 64 << 10


class Entry(NamedTuple):
    entry_id: str
    event: dict | None  # None: malformed, rejected
    source: str | None  # None: the control stream; else the node whose stream it is


def emit(client: redis.Redis, keys: Keys, job_id, event: dict, node: str | None = None) -> None:
    """Append ``event`` to the control stream, or to ``node``'s own stream of the job."""
    stream = keys.job_events(job_id) if node is None else keys.job_node_events(job_id, node)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(stream, {"e": json.dumps(event)}, maxlen=JOB_EVENTS_MAXLEN, approximate=True)
    pipe.expire(stream, EVENTS_TTL)
    pipe.execute()


def decode(fields: dict) -> dict | None:
    """The entry's event, or None if it is not a JSON object with a string `kind` (or is oversized)."""
    raw = fields.get(b"e")
    if not isinstance(raw, bytes) or len(raw) > MAX_EVENT_BYTES:
        return None
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("kind"), str) else None


def streams(keys: Keys, job_id, nodes: Iterable[str]) -> dict[str, str | None]:
    """Stream key -> its source (None for the control stream, else the node) of the job."""
    return {keys.job_events(job_id): None, **{keys.job_node_events(job_id, node): node for node in nodes}}


def order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def read(
    client: redis.Redis, keys: Keys, job_id, after: dict[str, str], nodes: Iterable[str] = (),
    block_ms: int | None = None,
) -> list[Entry]:
    """Return the entries of the job's streams after the ids in ``after`` (stream key -> id, updated
    in place; "0-0" for a stream not in it), waiting up to block_ms for the first, oldest first."""
    sources = streams(keys, job_id, nodes)
    reply = client.xread({key: after.get(key, "0-0") for key in sources}, block=block_ms, count=1000)
    entries = []
    for key, items in reply or ():
        key = key.decode() if isinstance(key, bytes) else key
        for entry_id, fields in items:
            after[key] = entry_id.decode()
            entries.append(Entry(entry_id.decode(), decode(fields), sources[key]))
    return sorted(entries, key=lambda entry: order(entry.entry_id))


def merge(sources: dict[str, str | None], replies: list) -> list[Entry]:
    """The XRANGE replies of ``sources``' streams (in its order) as entries, oldest first."""
    entries = [Entry(entry_id.decode(), decode(fields), source)
               for source, items in zip(sources.values(), replies, strict=True)
               for entry_id, fields in items]
    return sorted(entries, key=lambda entry: order(entry.entry_id))


def history(client: redis.Redis, keys: Keys, job_id, nodes: Iterable[str] = ()) -> list[Entry]:
    """Return every entry of the job's streams so far (the control one and each node's), oldest first."""
    sources = streams(keys, job_id, nodes)
    pipe = client.pipeline(transaction=False)
    for key in sources:
        pipe.xrange(key)
    return merge(sources, pipe.execute())
