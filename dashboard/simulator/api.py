"""JSON API: inject and clear simulator faults (staff only)."""

import redis
from django.http import JsonResponse
from django.views.decorators.http import require_POST

from dashboard.accounts.audit import audit
from dashboard.json_api import BadRequest, form_error, json_body, json_error
from dashboard.simulator import faults
from dashboard.simulator.forms import FaultForm


@require_POST
def fault(request):
    if not request.user.is_staff:
        return json_error("permission denied: fault injection is for staff users", 403)
    try:
        data = json_body(request, ["node", "gpu", "fault"])
    except BadRequest as exc:
        return json_error(str(exc), 400)
    form = FaultForm(data)
    if not form.is_valid():
        return form_error(form)
    node, gpu, name = form.cleaned_data["node"], form.cleaned_data["gpu"], form.cleaned_data["fault"]
    try:
        fields = faults.set_fault(node, gpu, name)
    except faults.FaultRefused as exc:
        form.add_error(exc.field, str(exc))
        return form_error(form)
    except redis.RedisError as exc:
        return json_error(f"Redis is unreachable, the fault was not set: {exc}", 503)
    audit(request, "simulator.fault", node if gpu is None else f"{node}/{gpu}", fault=name)
    return JsonResponse({"node": node, "gpu": gpu, "fault": name, "fields": fields})
