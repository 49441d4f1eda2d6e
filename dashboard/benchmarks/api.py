"""JSON API for benchmark jobs: list and launch, one job, cancel.

Authentication is global (session or Bearer, dashboard.accounts.middleware);
session POSTs keep Django's CSRF check. Launching needs
benchmarks.launch_benchmark; cancelling is for the job's launcher or a holder
of benchmarks.cancel_any_benchmark.
"""

import json
from collections.abc import Callable

from django import forms
from django.db.models import QuerySet
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.benchmarks.cancelling import JOBS, SWEEPS, AnyRun, Cancelling
from dashboard.benchmarks.launch import Refusal
from dashboard.benchmarks.launching import JOB_LAUNCH, SWEEP_LAUNCH, Launching
from dashboard.benchmarks.models import LAUNCH_PERMISSION, BenchmarkJob, FabricSweep, Run
from gpulse.sweep_spec import OPS

# The newest jobs the list shows: the page and its refresh show the same ones.
LIST_ROWS = 100


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


def refusal_response(refusal: Refusal) -> JsonResponse:
    response = JsonResponse({"error": refusal.message}, status=refusal.status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


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


def launch_form(request, launching: Launching) -> forms.Form | JsonResponse:
    """The launch request's valid form, or the response refusing it: no permission, no JSON object, invalid fields."""
    if not request.user.has_perm(LAUNCH_PERMISSION):
        return JsonResponse({"error": launching.refused()}, status=403)
    payload, problem = form_payload(request, launching.form)
    if problem:
        return problem
    form = launching.form(payload)
    if not form.is_valid():
        return form_errors(form)
    return form


def detail(found: QuerySet[AnyRun], as_json: Callable[[AnyRun], dict], missing: str) -> JsonResponse:
    """The one job or sweep ``found`` holds, as JSON with its launcher; 404 saying ``missing`` where it holds none."""
    run = found.select_related("created_by").first()
    if run is None:
        return JsonResponse({"error": missing}, status=404)
    return JsonResponse(as_json(run))


def cancelled(request, cancelling: Cancelling[AnyRun], pk: int, as_json: Callable[[AnyRun], dict],
              missing: str) -> JsonResponse:
    """Cancel run ``pk`` for the request's user: the run as JSON, 200 where it was still going, 409 where it had
    ended; 404 saying ``missing`` where there is none, 403 saying who may where this user may not."""
    run = cancelling.model.objects.filter(pk=pk).first()
    if run is None:
        return JsonResponse({"error": missing}, status=404)
    if not run.may_be_cancelled_by(request.user):
        return JsonResponse({"error": cancelling.refused(pk)}, status=403)
    was_going = cancelling.cancel_for(request, run)
    run.refresh_from_db()
    return JsonResponse(as_json(run), status=200 if was_going else 409)


def list_endpoint(launching: Launching, as_json: Callable, key: str):
    """The list endpoint of a kind of run: GET the newest LIST_ROWS under ``key``, POST launch one (202 with
    where to follow it)."""

    @require_http_methods(["GET", "POST"])
    def run_list(request):
        if request.method == "GET":
            runs = launching.model.objects.select_related("created_by")[:LIST_ROWS]
            return JsonResponse({key: [as_json(run) for run in runs]})
        form = launch_form(request, launching)
        if isinstance(form, JsonResponse):
            return form
        outcome = launching.start_for(request, form)
        if isinstance(outcome, Refusal):
            return refusal_response(outcome)
        return accepted(outcome, launching.api)

    return run_list


def run_endpoints(cancelling: Cancelling[AnyRun], as_json: Callable[[AnyRun], dict], name: str):
    """The one-run endpoints of a kind of run: GET its JSON, POST cancel it; a 404 says "no <name> <pk>"."""

    @require_GET
    def run_detail(request, pk):
        return detail(cancelling.model.objects.filter(pk=pk), as_json, f"no {name} {pk}")

    @require_POST
    def run_cancel(request, pk):
        return cancelled(request, cancelling, pk, as_json, f"no {name} {pk}")

    return run_detail, run_cancel


job_list = list_endpoint(JOB_LAUNCH, job_json, "jobs")
job_detail, job_cancel = run_endpoints(JOBS, job_json, "benchmark job")
sweep_list = list_endpoint(SWEEP_LAUNCH, lambda sweep: sweep_json(sweep, with_jobs=False), "sweeps")
sweep_detail, sweep_cancel = run_endpoints(SWEEPS, sweep_json, "fabric sweep")
