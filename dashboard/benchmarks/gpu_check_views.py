"""GPU check runs over HTTP: the pages (list and launch, one run, cancel) and the JSON API (the same, under
/api/v1/gpu-checks). Launching needs benchmarks.launch_benchmark, as a benchmark does; cancelling is for the
run's launcher or a holder of benchmarks.cancel_any_benchmark."""

from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.benchmarks.api import LIST_ROWS, list_endpoint, run_endpoints, run_times
from dashboard.benchmarks.cancelling import GPU_CHECKS
from dashboard.benchmarks.gpu_check_runs import GpuCheckForm, node_outcomes
from dashboard.benchmarks.launching import GPU_CHECK_LAUNCH
from dashboard.benchmarks.models import LAUNCH_PERMISSION, GpuCheckRun
from dashboard.benchmarks.views import cancel_from_page, launch_page
from gpulse.job_status import ACTIVE


def gpu_check_json(run: GpuCheckRun) -> dict:
    return {"id": run.pk, "status": run.status, "reason": run.reason, "nodes": run.nodes, "quick": run.quick,
            **run_times(run),
            # node -> {"status", "reason", "report": {"exit", "gpus", "seconds", "findings", "tests"} or None}
            "results": run.results}


@require_http_methods(["GET", "POST"])
def run_list(request):
    form = GpuCheckForm(request.POST or None) if request.user.has_perm(LAUNCH_PERMISSION) else None
    return launch_page(request, GPU_CHECK_LAUNCH, form, "benchmarks/gpu_checks.html",
                       {"runs": GpuCheckRun.objects.select_related("created_by")[:LIST_ROWS]})


@require_GET
def run_detail(request, pk):
    run = get_object_or_404(GpuCheckRun, pk=pk)
    context = {"run": run, "active": run.status in ACTIVE, "outcomes": node_outcomes(run),
               "may_cancel": run.may_be_cancelled_by(request.user)}
    return render(request, "benchmarks/gpu_check.html", context)


@require_POST
def run_cancel(request, pk):
    return cancel_from_page(request, GPU_CHECKS, pk, "benchmarks:gpu-check")


api_run_list = list_endpoint(GPU_CHECK_LAUNCH, gpu_check_json, "runs")
api_run_detail, api_run_cancel = run_endpoints(GPU_CHECKS, gpu_check_json, "GPU check run")
