"""Cancelling a job, a fabric sweep or a GPU check run for the person who asks: the cancel, its audit row,
the refusal's words.

The pages (views.py) and the API (api.py) answer differently, a redirect or JSON; what is done is this,
for every kind of run.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from dashboard.accounts.audit import audit
from dashboard.benchmarks.gpu_check_runs import cancel_gpu_checks
from dashboard.benchmarks.launch import cancel
from dashboard.benchmarks.models import CANCEL_ANY_PERMISSION, BenchmarkJob, FabricSweep, GpuCheckRun, Run
from dashboard.benchmarks.sweeps import cancel_sweep

AnyRun = TypeVar("AnyRun", bound=Run)


@dataclass(frozen=True)
class Cancelling(Generic[AnyRun]):
    """One kind of run as cancelling it goes: its model, how it is stopped, how refusals and the audit name it."""

    model: type[AnyRun]
    noun: str  # in refusals and on the pages: "job 12", "fabric sweep 3"
    stop: Callable[[AnyRun, str], bool]  # (the run, who cancels it) -> whether it was still going
    audit_action: str
    audit_noun: str  # the audit row's target: "job 12", "sweep 3"

    def refused(self, pk: int) -> str:
        """Why this user may not cancel run ``pk`` (Run.may_be_cancelled_by said no)."""
        return f"only its launcher or a holder of {CANCEL_ANY_PERMISSION} can cancel {self.noun} {pk}"

    def cancel_for(self, request, run: AnyRun) -> bool:
        """Cancel ``run`` for the request's user, who may, and audit it; False if it had already ended."""
        cancelled = self.stop(run, request.user.get_username())
        if cancelled:
            audit(request, self.audit_action, f"{self.audit_noun} {run.pk}")
        return cancelled


JOBS = Cancelling(model=BenchmarkJob, noun="job", stop=lambda job, _by: cancel(job),
                  audit_action="benchmark.cancel", audit_noun="job")
SWEEPS = Cancelling(model=FabricSweep, noun="fabric sweep", stop=cancel_sweep,
                    audit_action="fabric_sweep.cancel", audit_noun="sweep")
GPU_CHECKS = Cancelling(model=GpuCheckRun, noun="GPU check run", stop=cancel_gpu_checks,
                        audit_action="gpu_checks.cancel", audit_noun="GPU check run")
