"""Which samples of one node's collector ingest has seen, by (boot, seq): duplicates, restarts and twins.

It also keeps the node's counted time (CountedTime): how many seconds each
sample may count for usage and energy, judged by when the stream saw it.
"""

from collections import deque

NEW, DUPLICATE, RESTART, EARLIER_RUN = "new", "duplicate", "restart", "earlier run"
# A sample of another collector run that writes as this node while the current one does: dropped.
TWIN = "twin"
# A sample of an earlier run while the current one has gone quiet: that run takes the node back.
TAKEOVER = "takeover"

# A node is flagged twin until this long (stream time) passes without a second collector's sample.
TWIN_CLEAR_AFTER = 300.0
# The run that owns a node keeps it while its newest sample is at most this many of its intervals
# old (a node is stale after two) ...
OWNER_INTERVALS = 2
# ... and at most this long: a run claiming a long interval must not hold a live collector out for hours.
OWNER_MAX_QUIET = 60.0
# A node's first sample (since ingest started, or ever) has no earlier one to measure time from:
# it counts its interval, at most this long. Honest collectors sample every few seconds (1 s by
# default), so they count exactly as they say; one claiming an hour counts a minute, once.
FIRST_SAMPLE_MAX = 60.0
# A node's first sample is placed at most this long before it arrived, for the next to count from.
FIRST_TRANSIT_MAX = 1.0
# Counted time not yet used (a sample that came late leaves some for the next, early one) is kept up
# to the larger of this and one of the node's intervals.
CARRY_MIN = 1.0


class CountedTime:
    """How many seconds each of a node's samples counts for, from when the stream saw them.

    A sample says how long it stands for (``interval``), but the node is
    untrusted: one writing ``interval: 3600`` every second must not count an
    hour a second. So time is the control host's. Each sample has a position
    in time: when it was taken as the stream saw it (its arrival less
    ``held``, the seconds its collector kept it through a Redis outage, as
    gpulse.status.place uses it), or its own ``ts`` where that is earlier and
    within GPULSE_MAX_CLOCK_SKEW (the time a sample spends on its way, which
    varies, is then not the node's loss). Each sample adds to a credit the
    time its position is past the newest position so far, and counts its
    interval out of that credit, at most what is there. A position is never
    after the sample's arrival, so over any run of samples the node counts at
    most the stream time they span, plus its first sample's count and at most
    a second: two samples a second count a second between them, whatever
    either says.

    - A backlog written at once after a Redis outage counts in full: its
      samples were taken an interval apart, and ``held`` says so. ``held`` is
      the node's word too, but can only place a sample earlier, and positions
      before the newest count nothing.
    - Jitter: a sample that arrives late leaves credit for the next, early one;
      leftover credit is kept up to one interval (at least CARRY_MIN), so
      totals stay exact and a node silent for an hour cannot later spend the
      hour in samples that claim long intervals.
    - A node's first sample counts its interval up to FIRST_SAMPLE_MAX (there
      is nothing before it to measure from), and the next counts from its
      position, at most min(its interval, FIRST_TRANSIT_MAX) before it arrived.
      So does the first after ingest restarts: it keeps no reference across
      restarts (the entries it re-reads come first, in stream order).
    """

    __slots__ = ("reference", "credit")

    def __init__(self):
        self.reference: float | None = None  # the newest position so far (Redis' clock)
        self.credit = 0.0

    def seconds(self, position: float, arrived: float, interval: float) -> float:
        """The seconds a sample counts for (its claimed ``interval`` at most); ``position``: when it was taken
        (never after ``arrived``, when the stream saw it)."""
        position = min(position, arrived)
        if self.reference is None:
            self.reference = max(position, arrived - min(interval, FIRST_TRANSIT_MAX))
            return min(interval, FIRST_SAMPLE_MAX)
        if position > self.reference:
            self.credit += position - self.reference
            self.reference = position
        counted = min(interval, self.credit)
        self.credit = min(self.credit - counted, max(interval, CARRY_MIN))
        return counted


class CollectorIdentity:
    """The boot id of a node's collector run and the seqs of it seen lately.

    A duplicate is a seq seen before in the same run (a write retried after
    its reply was lost): it must not count twice. Seqs are kept in a window
    behind the highest: an entry reclaimed from a dead ingest consumer comes
    late but is not a duplicate; one older than the window is taken as new,
    since a retried write comes right after its original.

    Twins: a dead collector writes nothing, so a sample of an earlier run that
    reaches the stream after the current run began means two collectors write
    as this node (a copy started by mistake, an overlapping redeploy, or a
    process pretending to be the node's collector). The node is flagged
    (``twin_since``) until TWIN_CLEAR_AFTER passes without such a sample, and
    only one run's samples count: the one ingest saw first, so a newcomer
    cannot take a node's live view and usage over by starting later. The
    other's samples are TWIN, dropped by ingest (counted in ``twin_dropped``,
    not summed into the usage). Should the owner go quiet (OWNER_INTERVALS of
    its interval, at most OWNER_MAX_QUIET), the other takes the node over
    (TAKEOVER). A collector that restarts, its old run never heard again, is
    no twin.
    """

    WINDOW = 4096
    EARLIER_BOOTS = 4

    def __init__(self, boot: str | None = None, restarts: int = 0):
        self.boot = boot
        self.restarts = restarts
        self.high = -1  # highest seq of this run
        self.seen: set[int] = set()
        self.earlier: deque[str] = deque(maxlen=self.EARLIER_BOOTS)  # runs before this one
        # When ingest first saw each run (this one and the earlier ones); absent: before ingest started.
        self.first_seen: dict[str, float] = {}
        self.started: float | None = None  # when this run began owning the node (None: before ingest started)
        self.last_arrived: float | None = None  # when this run's newest sample arrived
        self.interval = 1.0  # as this run's newest sample says
        self.twin_since: float | None = None  # when a second collector was first seen (stream time)
        self.twin_last = 0.0  # when a second collector's sample last arrived
        self.twin_dropped = 0  # samples of the run that does not own the node, dropped
        self.counted = CountedTime()

    def check(self, boot: str, seq: int, arrived: float | None = None, interval: float = 1.0) -> str:
        """Record (boot, seq) of a sample that arrived at ``arrived``; return NEW, DUPLICATE, RESTART (a new
        run began), EARLIER_RUN (a late entry), TWIN (another live run's: drop it) or TAKEOVER."""
        if arrived is not None and self.twin_since is not None and arrived - self.twin_last > TWIN_CLEAR_AFTER:
            self.twin_since = None
        if boot != self.boot:
            if boot in self.earlier:
                if arrived is None or self.started is None or arrived < self.started:
                    return EARLIER_RUN
                # An earlier run writes after this one began: two collectors are alive.
                if self.twin_since is None:
                    self.twin_since = arrived
                self.twin_last = arrived
                quiet = arrived - (arrived if self.last_arrived is None else self.last_arrived)
                owner_alive = quiet <= min(OWNER_INTERVALS * self.interval, OWNER_MAX_QUIET)
                if owner_alive and self._seen_before(self.boot, boot):
                    self.twin_dropped += 1
                    return TWIN
                self.earlier.remove(boot)
                verdict = TAKEOVER
            elif self.boot is None:
                verdict = NEW
            else:
                self.restarts += 1
                verdict = RESTART
            if self.boot is not None:
                self.earlier.append(self.boot)
            if arrived is not None:
                self.first_seen.setdefault(boot, arrived)
                kept = {*self.earlier, boot}
                self.first_seen = {run: at for run, at in self.first_seen.items() if run in kept}
            self.boot, self.high, self.seen = boot, seq, {seq}
            self.started, self.last_arrived = arrived, None
            self._owner_sample(arrived, interval)
            return verdict
        if seq in self.seen:
            return DUPLICATE
        self.seen.add(seq)
        self._owner_sample(arrived, interval)
        if seq > self.high:
            self.high = seq
            if len(self.seen) > 2 * self.WINDOW:
                floor = seq - self.WINDOW
                self.seen = {s for s in self.seen if s > floor}
        return NEW

    def _seen_before(self, run: str | None, other: str) -> bool:
        """Whether ingest saw ``run`` before ``other`` (one seen before ingest started counts as first)."""
        return self.first_seen.get(run or "", float("-inf")) <= self.first_seen.get(other, float("-inf"))

    def _owner_sample(self, arrived: float | None, interval: float) -> None:
        if arrived is not None:
            if self.started is None:
                self.started = arrived
            self.last_arrived = arrived if self.last_arrived is None else max(self.last_arrived, arrived)
            self.interval = interval

    def is_newest(self, seq: int) -> bool:
        """Whether ``seq`` (just checked as NEW) is the run's highest so far."""
        return seq == self.high
