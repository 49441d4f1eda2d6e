"""How a running job stands, from its events stream and its nodes' worker heartbeats.

Pure: the control side (the `node_reported` task and the reaper) reads Redis
and passes what it read, so the same events always give the same verdict,
whichever control worker reads them and however often.
"""

from dataclasses import dataclass, field

from workers.heartbeat import TTL_S as HEARTBEAT_TTL_S
from workers.job_status import JobStatus

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


def read_progress(events: list[tuple[str, dict]]) -> Progress:
    """Fold (entry id, event) pairs, oldest first, into a Progress."""
    progress = Progress()
    for entry_id, event in events:
        if event["kind"] == "started":
            progress.started.add(event["node"])
        elif event["kind"] == "node_done" and event["node"] not in progress.reports:
            progress.reports[event["node"]] = event
            if event["status"] != JobStatus.SUCCEEDED and progress.first_failure_ms is None:
                progress.first_failure_ms = int(entry_id.split("-")[0])
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
