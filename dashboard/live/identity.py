"""Which samples of one node's collector ingest has seen, by (boot, seq): duplicates and restarts."""

from collections import deque

NEW, DUPLICATE, RESTART, EARLIER_RUN = "new", "duplicate", "restart", "earlier run"


class CollectorIdentity:
    """The boot id of a node's collector run and the seqs of it seen lately.

    A duplicate is a seq seen before in the same run (a write retried after
    its reply was lost): it must not count twice. Seqs are kept in a window
    behind the highest: an entry reclaimed from a dead ingest consumer comes
    late but is not a duplicate; one older than the window is taken as new,
    since a retried write comes right after its original.
    """

    WINDOW = 4096
    EARLIER_BOOTS = 4

    def __init__(self, boot: str | None = None, restarts: int = 0):
        self.boot = boot
        self.restarts = restarts
        self.high = -1  # highest seq of this run
        self.seen: set[int] = set()
        self.earlier: deque[str] = deque(maxlen=self.EARLIER_BOOTS)  # runs before this one

    def check(self, boot: str, seq: int) -> str:
        """Record (boot, seq); return NEW, DUPLICATE, RESTART (a new run began) or EARLIER_RUN (a late entry)."""
        if boot != self.boot:
            if boot in self.earlier:
                return EARLIER_RUN
            if self.boot is None:
                verdict = NEW
            else:
                self.earlier.append(self.boot)
                self.restarts += 1
                verdict = RESTART
            self.boot, self.high, self.seen = boot, seq, {seq}
            return verdict
        if seq in self.seen:
            return DUPLICATE
        self.seen.add(seq)
        if seq > self.high:
            self.high = seq
            if len(self.seen) > 2 * self.WINDOW:
                floor = seq - self.WINDOW
                self.seen = {s for s in self.seen if s > floor}
        return NEW

    def is_newest(self, seq: int) -> bool:
        """Whether ``seq`` (just checked as NEW) is the run's highest so far."""
        return seq == self.high
