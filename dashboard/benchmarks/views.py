from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.benchmarks.api import LIST_ROWS, cancel_refused, job_json
from dashboard.benchmarks.launch import LaunchForm, cancel, launch, node_picker
from dashboard.benchmarks.models import LAUNCH_PERMISSION, BenchmarkJob
from dashboard.benchmarks.tables import compare_rows, versions_table
from dashboard.benchmarks.throughput import job_throughput
from workers.job_status import ACTIVE


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
    picker = node_picker(form) if form else None
    context = {
        "form": form,
        "picker": picker,
        "held_in_picker": any(choice.held_by for choice in picker or []),
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
        raise PermissionDenied(cancel_refused(job))
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
