"""JSON API for benchmark jobs: list and launch, one job, cancel.

Authentication is global (session or Bearer, dashboard.accounts.middleware);
session POSTs keep Django's CSRF check. Launching needs
benchmarks.launch_benchmark; cancelling is for the job's launcher or a holder
of benchmarks.cancel_any_benchmark.
"""

import json
from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.db.models import QuerySet
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.benchmarks.launch import LaunchForm, Refusal, cancel, launch
from dashboard.benchmarks.models import (
    CANCEL_ANY_PERMISSION,
    LAUNCH_PERMISSION,
    BenchmarkJob,
    FabricSweep,
    Run,
)
from dashboard.benchmarks.sweeps import FabricSweepForm, cancel_sweep, launch_sweep
from gpulse.sweep_spec import OPS

# The newest jobs the list shows: the page and its refresh show the same ones.
LIST_ROWS = 100

AnyForm = TypeVar("AnyForm", bound=forms.Form)
AnyRun = TypeVar("AnyRun", bound=Run)


def run_times(run: Run) -> dict:
    """When a job or sweep was launched, by whom, when it started and ended, and how long it ran."""
    return {
        "created": run.created.isoformat(),
        "created_by": run.created_by.username if run.created_by else None,
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        "duration_s": run.duration,
    }


def job_json(job: BenchmarkJob) -> dict:
    return {
        "id": job.pk,
        "status": job.status,
        "reason": job.reason,
        "op": job.op,
        # Whether each size has an in-place row after its out-of-place one (alltoall and sendrecv have none).
        "has_in_place": OPS[job.op].in_place,
        "nodes": job.nodes,
        "ranks_per_node": job.ranks_per_node,
        "backend": job.backend,
        "backend_ran": job.backend_ran,
        "dtype": job.dtype,
        "min_bytes": job.min_bytes,
        "max_bytes": job.max_bytes,
        **run_times(job),
        "avg_busbw": job.avg_busbw,
        "peak_busbw": job.peak_busbw,
        "busbw_largest": job.busbw_largest,
        "result": job.result,
    }


def cancel_refused(what: str) -> str:
    """Why this user may not cancel ``what`` ("job 12", "fabric sweep 3")."""
    return f"only its launcher or a holder of {CANCEL_ANY_PERMISSION} can cancel {what}"


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
    form = launch_form(request, LaunchForm, "benchmarks")
    if isinstance(form, JsonResponse):
        return form
    outcome = launch(request.user, form.cleaned_data)
    if isinstance(outcome, Refusal):
        return refusal_response(outcome)
    audit(request, "benchmark.launch", f"job {outcome.pk}", nodes=outcome.nodes, held=form.held)
    return accepted(outcome, "benchmarks-api:detail")


@require_GET
def job_detail(request, pk):
    return detail(BenchmarkJob.objects.filter(pk=pk), job_json, f"no benchmark job {pk}")


@require_POST
def job_cancel(request, pk):
    job = BenchmarkJob.objects.filter(pk=pk).first()
    if job is None:
        return JsonResponse({"error": f"no benchmark job {pk}"}, status=404)
    if not job.may_be_cancelled_by(request.user):
        return JsonResponse({"error": cancel_refused(f"job {job.pk}")}, status=403)
    cancelled = cancel(job)
    if cancelled:
        audit(request, "benchmark.cancel", f"job {job.pk}")
    job.refresh_from_db()
    return JsonResponse(job_json(job), status=200 if cancelled else 409)


def sweep_json(sweep: FabricSweep, with_jobs: bool = True) -> dict:
    """The sweep as the API gives it; ``with_jobs``: its pair jobs too (one query; the list leaves them out)."""
    found = {
        "id": sweep.pk,
        "status": sweep.status,
        "reason": sweep.reason,
        "nodes": sweep.nodes,
        "rounds": sweep.rounds,
        "round": sweep.round,
        "backend": sweep.backend,
        "dtype": sweep.dtype,
        "size_bytes": sweep.size_bytes,
        "flag_fraction": sweep.flag_fraction,
        **run_times(sweep),
        # {"links": [{"a", "b", "busbw"}], "failed": [{"a", "b", "reason"}], "median", "node_medians",
        #  "slow_links": [[a, b]], "slow_nodes": [...]} once the last round has ended
        "result": sweep.result,
    }
    if with_jobs:
        found["jobs"] = [{"id": job.pk, "round": job.sweep_round, "nodes": job.nodes, "status": job.status}
                         for job in sweep.jobs.order_by("sweep_round", "pk")]
    return found


def form_payload(request, form_class) -> tuple[dict | None, JsonResponse | None]:
    """The JSON body over the form's defaults (fields a script leaves out, as an untouched form), or an error."""
    try:
        payload = json.loads(request.body or b"{}")
    except json.JSONDecodeError as exc:
        return None, JsonResponse({"error": f"body is not JSON: {exc}"}, status=400)
    if not isinstance(payload, dict):
        return None, JsonResponse({"error": "body must be a JSON object"}, status=400)
    defaults = {name: field.initial for name, field in form_class.base_fields.items() if field.initial is not None}
    return {**defaults, **payload}, None


def accepted(launched, route: str) -> JsonResponse:
    """202 for a launched job or sweep, with where to follow it."""
    response = JsonResponse({"id": launched.pk, "status": launched.status}, status=202)
    response["Location"] = reverse(route, args=[launched.pk])
    return response


def form_errors(form) -> JsonResponse:
    errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
    return JsonResponse({"error": "invalid request", "fields": errors}, status=400)


def launch_form(request, form_class: type[AnyForm], launching: str) -> AnyForm | JsonResponse:
    """The launch request's valid form, or the response refusing it: no permission, no JSON object, invalid fields."""
    if not request.user.has_perm(LAUNCH_PERMISSION):
        return JsonResponse({"error": f"launching {launching} needs the launch_benchmark permission"}, status=403)
    payload, problem = form_payload(request, form_class)
    if problem:
        return problem
    form = form_class(payload)
    if not form.is_valid():
        return form_errors(form)
    return form


def detail(found: QuerySet[AnyRun], as_json: Callable[[AnyRun], dict], missing: str) -> JsonResponse:
    """The one job or sweep ``found`` holds, as JSON with its launcher; 404 saying ``missing`` where it holds none."""
    run = found.select_related("created_by").first()
    if run is None:
        return JsonResponse({"error": missing}, status=404)
    return JsonResponse(as_json(run))


@require_http_methods(["GET", "POST"])
def sweep_list(request):
    if request.method == "GET":
        sweeps = FabricSweep.objects.select_related("created_by")[:LIST_ROWS]
        return JsonResponse({"sweeps": [sweep_json(s, with_jobs=False) for s in sweeps]})
    form = launch_form(request, FabricSweepForm, "a fabric sweep")
    if isinstance(form, JsonResponse):
        return form
    sweep = launch_sweep(request.user, form.cleaned_data)
    audit(request, "fabric_sweep.launch", f"sweep {sweep.pk}", nodes=sweep.nodes, held=form.held)
    return accepted(sweep, "benchmarks-api:sweep")


@require_GET
def sweep_detail(request, pk):
    return detail(FabricSweep.objects.filter(pk=pk), sweep_json, f"no fabric sweep {pk}")


@require_POST
def sweep_cancel(request, pk):
    sweep = FabricSweep.objects.filter(pk=pk).first()
    if sweep is None:
        return JsonResponse({"error": f"no fabric sweep {pk}"}, status=404)
    if not sweep.may_be_cancelled_by(request.user):
        return JsonResponse({"error": cancel_refused(f"fabric sweep {pk}")}, status=403)
    cancelled = cancel_sweep(sweep, request.user.get_username())
    if cancelled:
        audit(request, "fabric_sweep.cancel", f"sweep {pk}")
    sweep.refresh_from_db()
    return JsonResponse(sweep_json(sweep), status=200 if cancelled else 409)
