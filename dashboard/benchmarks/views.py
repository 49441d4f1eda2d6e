from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.benchmarks.api import LIST_ROWS, job_json
from dashboard.benchmarks.cancelling import JOBS, SWEEPS, Cancelling
from dashboard.benchmarks.launch import LaunchForm, Refusal, node_picker
from dashboard.benchmarks.launching import JOB_LAUNCH, SWEEP_LAUNCH, Launching
from dashboard.benchmarks.models import LAUNCH_PERMISSION, BenchmarkJob, FabricSweep
from dashboard.benchmarks.sweeps import (
    BANDS,
    FabricSweepForm,
    link_table,
    matrix_rows,
    previous_of,
)
from dashboard.benchmarks.tables import compare_rows, versions_table
from dashboard.benchmarks.throughput import job_throughput
from gpulse.job_status import ACTIVE


def picker_context(form) -> dict:
    """A launch form (None for a user who may not launch) with its node picker, for benchmarks/node_picker.html."""
    picker = node_picker(form) if form else None
    return {"form": form, "picker": picker, "held_in_picker": any(choice.held_by for choice in picker or [])}


def launch_page(request, launching: Launching, form, template: str, context: dict) -> HttpResponse:
    """A list of runs with its launch form (None exactly when the user may not launch). A POST launches one
    and goes to its page, or shows the form again with why not."""
    status = 200
    if request.method == "POST":
        if form is None:
            raise PermissionDenied(launching.refused())
        if not form.is_valid():
            status = 400
        elif isinstance(outcome := launching.start_for(request, form), Refusal):
            form.add_error(outcome.field, outcome.message)
            status = outcome.status
        else:
            return redirect(launching.page, pk=outcome.pk)
    return render(request, template, {**picker_context(form), **context}, status=status)


@require_http_methods(["GET", "POST"])
def job_list(request):
    can_launch = request.user.has_perm(LAUNCH_PERMISSION)
    # "Run again" on a job's page: its values fill the form, which the person still submits.
    again = request.GET.get("again", "")
    rerun = BenchmarkJob.objects.filter(pk=again).first() if again.isdigit() else None
    initial = LaunchForm.initial_from(rerun) if rerun else None
    form = LaunchForm(request.POST or None, initial=initial) if can_launch else None
    return launch_page(request, JOB_LAUNCH, form, "benchmarks/list.html", {
        "jobs": BenchmarkJob.objects.select_related("created_by")[:LIST_ROWS],
        "throughput": job_throughput(),
    })


@require_GET
def job_detail(request, pk):
    job = get_object_or_404(BenchmarkJob, pk=pk)
    versions, version_rows = versions_table(job)
    context = {
        "job": job, "job_json": job_json(job), "active": job.status in ACTIVE,
        "may_cancel": job.may_be_cancelled_by(request.user), "may_launch": request.user.has_perm(LAUNCH_PERMISSION),
        "versions": versions, "version_rows": version_rows,
    }
    return render(request, "benchmarks/detail.html", context)


def cancel_from_page(request, cancelling: Cancelling, pk: int, page: str):
    """Cancel run ``pk`` from its page (the route ``page``) and go back to it, saying so where it had already ended."""
    run = get_object_or_404(cancelling.model, pk=pk)
    if not run.may_be_cancelled_by(request.user):
        raise PermissionDenied(cancelling.refused(pk))
    if not cancelling.cancel_for(request, run):
        messages.info(request, f"{cancelling.noun} {pk} had already ended")
    return redirect(page, pk=pk)


@require_POST
def job_cancel(request, pk):
    return cancel_from_page(request, JOBS, pk, "benchmarks:detail")


@require_GET
def job_compare(request):
    ids = sorted({int(i) for i in request.GET.getlist("id") if i.isdigit()})
    # Oldest first: the first is the baseline the others' differences are taken from.
    jobs = list(BenchmarkJob.objects.filter(pk__in=ids, result__isnull=False).order_by("pk"))
    context = {"jobs": jobs, "without_result": sorted(set(ids) - {job.pk for job in jobs})}
    if len(jobs) >= 2:
        context.update(rows=compare_rows(jobs), jobs_json=[job_json(job) for job in jobs])
    return render(request, "benchmarks/compare.html", context)


@require_http_methods(["GET", "POST"])
def sweep_list(request):
    can_launch = request.user.has_perm(LAUNCH_PERMISSION)
    form = FabricSweepForm(request.POST or None) if can_launch else None
    return launch_page(request, SWEEP_LAUNCH, form, "benchmarks/sweeps.html",
                       {"sweeps": FabricSweep.objects.select_related("created_by")[:LIST_ROWS]})


@require_GET
def sweep_detail(request, pk):
    sweep = get_object_or_404(FabricSweep, pk=pk)
    previous = previous_of(sweep)
    context = {
        "sweep": sweep, "active": sweep.status in ACTIVE, "previous": previous, "matrix": matrix_rows(sweep),
        "links": link_table(sweep, previous), "bands": BANDS,
        "jobs": sweep.jobs.order_by("sweep_round", "pk"), "may_cancel": sweep.may_be_cancelled_by(request.user),
    }
    return render(request, "benchmarks/sweep.html", context)


@require_POST
def sweep_cancel(request, pk):
    return cancel_from_page(request, SWEEPS, pk, "benchmarks:sweep")
