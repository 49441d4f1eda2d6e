"""JSON API for benchmark jobs: list and launch, one job, cancel.

Authentication is global (session or Bearer, dashboard.accounts.middleware);
session POSTs keep Django's CSRF check. Launching needs
benchmarks.launch_benchmark; cancelling is for the job's launcher or a holder
of benchmarks.cancel_any_benchmark.
"""

import json

from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.benchmarks.launch import LaunchForm, Refusal, cancel, launch
from dashboard.benchmarks.models import (
    CANCEL_ANY_PERMISSION,
    LAUNCH_PERMISSION,
    BenchmarkJob,
)

# The newest jobs the list shows: the page and its refresh show the same ones.
LIST_ROWS = 100


def job_json(job: BenchmarkJob) -> dict:
    return {
        "id": job.pk,
        "status": job.status,
        "reason": job.reason,
        "nodes": job.nodes,
        "ranks_per_node": job.ranks_per_node,
        "backend": job.backend,
        "backend_ran": job.backend_ran,
        "dtype": job.dtype,
        "min_bytes": job.min_bytes,
        "max_bytes": job.max_bytes,
        "created": job.created.isoformat(),
        "created_by": job.created_by.username if job.created_by else None,
        "started": job.started.isoformat() if job.started else None,
        "finished": job.finished.isoformat() if job.finished else None,
        "duration_s": job.duration,
        "avg_busbw": job.avg_busbw,
        "peak_busbw": job.peak_busbw,
        "busbw_largest": job.busbw_largest,
        "result": job.result,
    }


def cancel_refused(job: BenchmarkJob) -> str:
    return f"only the job's launcher or a holder of {CANCEL_ANY_PERMISSION} can cancel job {job.pk}"


def refusal_response(refusal: Refusal) -> JsonResponse:
    response = JsonResponse({"error": refusal.message}, status=refusal.status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


@require_http_methods(["GET", "POST"])
def job_list(request):
    if request.method == "GET":
        jobs = BenchmarkJob.objects.select_related("created_by")[:LIST_ROWS]
        return JsonResponse({"jobs": [job_json(j) for j in jobs]})
    if not request.user.has_perm(LAUNCH_PERMISSION):
        return JsonResponse({"error": "launching benchmarks needs the launch_benchmark permission"}, status=403)
    try:
        payload = json.loads(request.body or b"{}")
    except json.JSONDecodeError as exc:
        return JsonResponse({"error": f"body is not JSON: {exc}"}, status=400)
    if not isinstance(payload, dict):
        return JsonResponse({"error": "body must be a JSON object"}, status=400)
    # Fields a script leaves out take the form's defaults, as an untouched form would.
    defaults = {name: field.initial for name, field in LaunchForm.base_fields.items() if field.initial is not None}
    form = LaunchForm({**defaults, **payload})
    if not form.is_valid():
        errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
        return JsonResponse({"error": "invalid benchmark request", "fields": errors}, status=400)
    outcome = launch(request.user, form.cleaned_data)
    if isinstance(outcome, Refusal):
        return refusal_response(outcome)
    audit(request, "benchmark.launch", f"job {outcome.pk}", nodes=outcome.nodes, held=form.held)
    response = JsonResponse({"id": outcome.pk, "status": outcome.status}, status=202)
    response["Location"] = reverse("benchmarks-api:detail", args=[outcome.pk])
    return response


@require_GET
def job_detail(request, pk):
    job = BenchmarkJob.objects.filter(pk=pk).select_related("created_by").first()
    if job is None:
        return JsonResponse({"error": f"no benchmark job {pk}"}, status=404)
    return JsonResponse(job_json(job))


@require_POST
def job_cancel(request, pk):
    job = BenchmarkJob.objects.filter(pk=pk).first()
    if job is None:
        return JsonResponse({"error": f"no benchmark job {pk}"}, status=404)
    if not job.may_be_cancelled_by(request.user):
        return JsonResponse({"error": cancel_refused(job)}, status=403)
    cancelled = cancel(job)
    if cancelled:
        audit(request, "benchmark.cancel", f"job {job.pk}")
    job.refresh_from_db()
    return JsonResponse(job_json(job), status=200 if cancelled else 409)
