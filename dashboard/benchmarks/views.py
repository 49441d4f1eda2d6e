from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.benchmarks.api import LIST_ROWS, cancel_refused, job_json
from dashboard.benchmarks.launch import LaunchForm, cancel, launch, node_picker
from dashboard.benchmarks.models import LAUNCH_PERMISSION, BenchmarkJob, FabricSweep
from dashboard.benchmarks.sweeps import (
    BANDS,
    FabricSweepForm,
    cancel_sweep,
    launch_sweep,
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


@require_http_methods(["GET", "POST"])
def job_list(request):
    can_launch = request.user.has_perm(LAUNCH_PERMISSION)
    # "Run again" on a job's page: its values fill the form, which the person still submits.
    again = request.GET.get("again", "")
    rerun = BenchmarkJob.objects.filter(pk=again).first() if again.isdigit() else None
    initial = LaunchForm.initial_from(rerun) if rerun else None
    form = LaunchForm(request.POST or None, initial=initial) if can_launch else None
    status = 200
    if request.method == "POST":
        if form is None:  # None exactly when the user may not launch
            raise PermissionDenied("launching benchmarks needs the launch_benchmark permission")
        if form.is_valid():
            outcome = launch(request.user, form.cleaned_data)
            if isinstance(outcome, BenchmarkJob):
                audit(request, "benchmark.launch", f"job {outcome.pk}", nodes=outcome.nodes, held=form.held)
                return redirect("benchmarks:detail", pk=outcome.pk)
            form.add_error(outcome.field, outcome.message)
            status = outcome.status
        else:
            status = 400
    context = {
        **picker_context(form),
        "jobs": BenchmarkJob.objects.select_related("created_by")[:LIST_ROWS],
        "throughput": job_throughput(),
    }
    return render(request, "benchmarks/list.html", context, status=status)


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


@require_POST
def job_cancel(request, pk):
    job = get_object_or_404(BenchmarkJob, pk=pk)
    if not job.may_be_cancelled_by(request.user):
        raise PermissionDenied(cancel_refused(f"job {job.pk}"))
    if cancel(job):
        audit(request, "benchmark.cancel", f"job {job.pk}")
    else:
        messages.info(request, f"job {job.pk} had already ended")
    return redirect("benchmarks:detail", pk=pk)


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
    status = 200
    if request.method == "POST":
        if form is None:
            raise PermissionDenied("launching a fabric sweep needs the launch_benchmark permission")
        if form.is_valid():
            sweep = launch_sweep(request.user, form.cleaned_data)
            audit(request, "fabric_sweep.launch", f"sweep {sweep.pk}", nodes=sweep.nodes, held=form.held)
            return redirect("benchmarks:sweep", pk=sweep.pk)
        status = 400
    context = {
        **picker_context(form),
        "sweeps": FabricSweep.objects.select_related("created_by")[:LIST_ROWS],
    }
    return render(request, "benchmarks/sweeps.html", context, status=status)


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
    sweep = get_object_or_404(FabricSweep, pk=pk)
    if not sweep.may_be_cancelled_by(request.user):
        raise PermissionDenied(cancel_refused(f"fabric sweep {pk}"))
    if cancel_sweep(sweep, request.user.get_username()):
        audit(request, "fabric_sweep.cancel", f"sweep {pk}")
    else:
        messages.info(request, f"fabric sweep {pk} had already ended")
    return redirect("benchmarks:sweep", pk=pk)
