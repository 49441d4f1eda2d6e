from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.benchmarks.api import LIST_ROWS, cancel_refused, job_json
from dashboard.benchmarks.launch import LaunchForm, cancel, launch
from dashboard.benchmarks.models import LAUNCH_PERMISSION, BenchmarkJob
from dashboard.benchmarks.throughput import job_throughput


@require_http_methods(["GET", "POST"])
def job_list(request):
    can_launch = request.user.has_perm(LAUNCH_PERMISSION)
    form = LaunchForm(request.POST or None) if can_launch else None
    status = 200
    if request.method == "POST":
        if form is None:  # None exactly when the user may not launch
            raise PermissionDenied("launching benchmarks needs the launch_benchmark permission")
        if form.is_valid():
            outcome = launch(request.user, form.cleaned_data)
            if isinstance(outcome, BenchmarkJob):
                audit(request, "benchmark.launch", f"job {outcome.pk}", nodes=outcome.nodes)
                return redirect("benchmarks:detail", pk=outcome.pk)
            messages.error(request, outcome.message)
            status = outcome.status
        else:
            status = 400
    context = {
        "form": form,
        "jobs": BenchmarkJob.objects.select_related("created_by")[:LIST_ROWS],
        "throughput": job_throughput(),
    }
    return render(request, "benchmarks/list.html", context, status=status)


@require_GET
def job_detail(request, pk):
    job = get_object_or_404(BenchmarkJob, pk=pk)
    context = {"job": job, "job_json": job_json(job), "may_cancel": job.may_be_cancelled_by(request.user)}
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
    ids = [int(i) for i in request.GET.getlist("id") if i.isdigit()]
    jobs = [job_json(j) for j in BenchmarkJob.objects.filter(pk__in=ids, result__isnull=False)]
    return render(request, "benchmarks/compare.html", {"jobs": jobs})
