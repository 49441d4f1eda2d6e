"""How a running job stands, from its events streams and its nodes' worker heartbeats.

Pure: the control side (the reaper) reads Redis and passes what it read, so
the same events always give the same verdict, whichever control worker reads
them and however often.

A node's `started` and `node_done` count only from the node's own stream
(gpulse/job_events.py), which only its worker's ACL user may write, and for
that node whatever their `node` field says; the job's result comes only from
its first node's (rank 0's) report. An entry that is not a well-formed event
is rejected and counted (REJECTED), never raised: one bad row cannot stop the
reaper or keep the job from ending.
"""

import collections
import logging
import threading
from dataclasses import dataclass, field

from gpulse.heartbeat import TTL_S as HEARTBEAT_TTL_S
from gpulse.job_events import Entry
from gpulse.job_status import JobStatus

log = logging.getLogger(__name__)

# Rejected entries since the process started, by why; each is logged once (the
# reaper reads a running job's streams every pass): the ids seen are bounded.
REJECTED: collections.Counter[str] = collections.Counter()
_SEEN_MAX = 10_000
_seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
_seen_lock = threading.Lock()
_STATUSES = {status.value for status in JobStatus}
_ROW_FIELDS: dict[str, type | tuple[type, ...]] = {
    "size": int, "count": int, "type": str, "redop": str, "time_us": (int, float),
    "algbw": (int, float), "busbw": (int, float), "wrong": (int, type(None)), "inplace": bool}


def reject(job_id, entry: Entry, why: str) -> None:
    """Count a rejected entry and log it, each entry of each job once."""
    key = (job_id, entry.source, entry.entry_id)
    with _seen_lock:
        if key in _seen:
            return
        _seen[key] = None
        if len(_seen) > _SEEN_MAX:
            _seen.popitem(last=False)
        REJECTED[why] += 1
    log.warning("benchmark job %s: entry %s of %s's stream rejected: %s", job_id, entry.entry_id,
                entry.source or "the control", why)


def valid_row(row) -> bool:
    return (isinstance(row, dict) and set(row) == set(_ROW_FIELDS)
            and all(isinstance(row[name], kind) and not (isinstance(row[name], bool) and kind is not bool)
                    for name, kind in _ROW_FIELDS.items()))


def report_problem(event: dict, head: bool) -> str | None:
    """Why a node_done is malformed, or None; ``head``: rank 0's node, whose result holds the rows."""
    if event.get("status") not in _STATUSES or event["status"] in (JobStatus.QUEUED, JobStatus.RUNNING):
        return "node_done without a final status"
    if not isinstance(event.get("reason"), str | None) or not isinstance(event.get("crashed", False), bool):
        return "node_done with a malformed reason"
    result = event.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("versions", {}), dict):
        return "node_done with a malformed result"
    if head and event["status"] == JobStatus.SUCCEEDED:
        spec = result.get("spec")
        rows = result.get("rows")
        if not isinstance(spec, dict) or not isinstance(spec.get("backend"), str):
            return "rank 0's node_done without its spec"
        if not isinstance(rows, list) or not all(valid_row(row) for row in rows):
            return "rank 0's node_done with malformed rows"
    return None

# After a first node reports a failure, the others get this long to report
# theirs before the job ends without them: a live peer reports within a few
# seconds (its ranks lose the failed one), and a node whose worker died has
# lost its heartbeat by then, so the reason can name it as the cause.
FAILURE_SETTLE_S = HEARTBEAT_TTL_S + 5


@dataclass
class Progress:
    """What a job's events stream says about its nodes."""

    reports: dict[str, dict] = field(default_factory=dict)  # node -> its node_done event, in stream order
    started: set[str] = field(default_factory=set)  # nodes whose task began
    first_failure_ms: int | None = None  # stream time (Redis clock) of the first failed report


@dataclass
class Outcome:
    status: str
    reason: str


def read_progress(entries: list[Entry], nodes: list[str], job_id=None) -> Progress:
    """Fold a job's entries (gpulse/job_events.py history), oldest first, into a Progress.

    A node's events count only from its own stream, as that node's; rank 0 is
    ``nodes[0]``. A malformed entry, one naming another node, or one a node has no
    business writing is rejected (counted, logged once) and skipped.
    """
    progress = Progress()
    for entry in entries:
        event, node = entry.event, entry.source
        if node is None:
            if event is None:
                reject(job_id, entry, "malformed entry")
            continue  # the control side's own stream: its `final` is written after the job ended
        if node not in nodes:
            continue
        if event is None:
            reject(job_id, entry, "malformed entry")
        elif event.get("node", node) != node:
            reject(job_id, entry, "event naming another node")
        elif event["kind"] == "started":
            progress.started.add(node)
        elif event["kind"] == "row":
            if node != nodes[0] or not valid_row(event.get("row")):
                reject(job_id, entry, "row from a node other than rank 0's" if node != nodes[0] else "malformed row")
        elif event["kind"] == "node_done":
            if node in progress.reports:
                continue
            problem = report_problem(event, head=node == nodes[0])
            if problem is not None:
                reject(job_id, entry, problem)
                continue
            # Its own node's name, and node_rank as the job's order says, whatever the event said.
            progress.reports[node] = {**event, "node": node, "node_rank": nodes.index(node)}
            if event["status"] != JobStatus.SUCCEEDED and progress.first_failure_ms is None:
                progress.first_failure_ms = int(entry.entry_id.split("-")[0])
        else:
            reject(job_id, entry, f"unknown kind {event['kind'][:40]!r}")
    return progress


def decide(nodes: list[str], progress: Progress, workerless: set[str], now_ms: int, deadline_ms: int,
           timeout_s: int) -> Outcome | None:
    """Return how the job ended, or None while it may still end otherwise.

    SUCCEEDED means every node reported success: the caller records node 0's rows.
    """
    silent = [node for node in nodes if node not in progress.reports]
    # A crash is the cause; the broken connections its peers then report are consequences.
    failed = sorted((r for r in progress.reports.values() if r["status"] != JobStatus.SUCCEEDED),
                    key=lambda r: not r.get("crashed"))
    if not silent:
        return failure(failed, [], [], progress) if failed else Outcome(JobStatus.SUCCEEDED, "")
    gone = [node for node in silent if node in workerless]
    if gone:  # its task died with its worker: no report will ever come
        return failure(failed, gone, [n for n in silent if n not in gone], progress)
    if failed:
        assert progress.first_failure_ms is not None  # set by the first failed report
        if now_ms - progress.first_failure_ms >= FAILURE_SETTLE_S * 1000:
            return failure(failed, [], silent, progress)
    if now_ms >= deadline_ms:
        return Outcome(JobStatus.TIMED_OUT,
                       f"no report within the job's {timeout_s} s limit from {describe_missing(silent, progress)}")
    return None


def failure(failed: list[dict], gone: list[str], slow: list[str], progress: Progress) -> Outcome:
    """The reason leads with the first cause: a node whose worker died, else the first node that failed."""
    causes = [f"{node}: its benchmark worker stopped {'during' if node in progress.started else 'before'} the job"
              for node in gone]
    causes += [f"{r['node']}: {r['reason']}" for r in failed]
    reason = causes[0]
    if len(causes) > 1:
        more = len(causes) - 2
        others = f"; and {more} other node{'s' if more > 1 else ''} failed" if more else ""
        reason += f" (then {causes[1]}{others})"
    if slow:
        reason += f" (no report from {describe_missing(slow, progress)})"
    first_status = failed[0]["status"] if failed and not gone else JobStatus.FAILED
    status = JobStatus.TIMED_OUT if first_status == JobStatus.TIMED_OUT else JobStatus.FAILED
    return Outcome(status, reason)


def describe_missing(nodes: list[str], progress: Progress) -> str:
    """Name nodes that have not reported: silent (never started) or still running."""
    return ", ".join(f"{node} ({'still running' if node in progress.started else 'never started'})"
                     for node in nodes)
