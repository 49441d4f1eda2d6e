"""Launching a job, a fabric sweep or a GPU check run for the person who asks: the form, the launch, its
audit row, the words of a refusal.

The pages (views.py) and the API (api.py) answer differently, a redirect or JSON; what is done is this,
for every kind of run.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django import forms

from dashboard.accounts.audit import audit
from dashboard.benchmarks.gpu_check_runs import GpuCheckForm, launch_gpu_checks
from dashboard.benchmarks.launch import LaunchForm, Refusal, launch
from dashboard.benchmarks.models import BenchmarkJob, FabricSweep, GpuCheckRun, Run
from dashboard.benchmarks.sweeps import FabricSweepForm, launch_sweep


@dataclass(frozen=True)
class Launching:
    """One kind of run as launching it goes."""

    model: type[Run]
    form: type[forms.Form]
    start: Callable[..., Run | Refusal]  # (user, the form's cleaned data) -> the run, or why not
    what: str  # what the permission is needed for: "launching <what> needs ..."
    audit_action: str
    audit_noun: str  # the audit row's target: "job 12"
    page: str  # the route of a run's page
    api: str  # the route of a run's JSON

    def refused(self) -> str:
        """Why a user without benchmarks.launch_benchmark may not launch one."""
        return f"launching {self.what} needs the launch_benchmark permission"

    def start_for(self, request, form) -> Run | Refusal:
        """Launch from a valid ``form`` for the request's user, who may, and audit it; or the refusal."""
        outcome = self.start(request.user, form.cleaned_data)
        if not isinstance(outcome, Refusal):
            audit(request, self.audit_action, f"{self.audit_noun} {outcome.pk}", nodes=outcome.nodes,
                  held=form.held)
        return outcome


JOB_LAUNCH = Launching(model=BenchmarkJob, form=LaunchForm, start=launch, what="benchmarks",
                       audit_action="benchmark.launch", audit_noun="job", page="benchmarks:detail",
                       api="benchmarks-api:detail")
SWEEP_LAUNCH = Launching(model=FabricSweep, form=FabricSweepForm, start=launch_sweep, what="a fabric sweep",
                         audit_action="fabric_sweep.launch", audit_noun="sweep", page="benchmarks:sweep",
                         api="benchmarks-api:sweep")
GPU_CHECK_LAUNCH = Launching(model=GpuCheckRun, form=GpuCheckForm, start=launch_gpu_checks, what="GPU checks",
                             audit_action="gpu_checks.launch", audit_noun="GPU check run",
                             page="benchmarks:gpu-check", api="benchmarks-api:gpu-check")
