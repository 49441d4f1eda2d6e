"""The states of a benchmark job, and of one node's share of it.

Defined here, without Django, because node workers report a node's outcome
with these values and the control side records the job's with the same ones
(dashboard/benchmarks/models.py takes its choices from this enum).
"""

import enum


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ").title()


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
