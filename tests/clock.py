"""A clock a test sets by hand, for code that takes one (ingest, the incident tracker)."""


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now
