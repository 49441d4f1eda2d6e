"""JSON API for rules, webhooks, silences, alerts and simulator faults.

Authentication is global (session or Bearer, dashboard.accounts.middleware);
session POSTs keep Django's CSRF check. Writes need the model permissions
(alerts.add_rule, alerts.change_webhookendpoint, ...); the simulator needs staff.
"""

import json

import redis
from django.forms.models import model_to_dict
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.alerts import simulator
from dashboard.alerts.access import RULES, SILENCES, WEBHOOKS, ModelAccess
from dashboard.alerts.forms import FaultForm, RuleForm, WebhookForm
from dashboard.alerts.models import FIRING, PENDING, Alert, Rule, Silence, WebhookEndpoint


class BadRequest(Exception):
    pass


def _error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _form_error(form) -> JsonResponse:
    errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
    first_field, messages = next(iter(errors.items()))
    label = "request" if first_field == "__all__" else first_field
    return JsonResponse({"error": f"{label}: {messages[0]}", "errors": errors}, status=400)


def _body(request, allowed: list[str]) -> dict:
    try:
        data = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(data) - set(allowed) - {"id"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field (fields: {', '.join(allowed)})")
    data.pop("id", None)
    return data


def _denied(request, perm: str) -> JsonResponse | None:
    if request.user.has_perm(perm):
        return None
    return _error(f"permission denied: you need {perm}", 403)


def rule_json(rule: Rule) -> dict:
    return {"id": rule.id, **model_to_dict(rule, fields=RuleForm.Meta.fields)}


def webhook_json(endpoint: WebhookEndpoint) -> dict:
    fields = [f for f in WebhookForm.Meta.fields if f != "secret"]
    return {"id": endpoint.id, **model_to_dict(endpoint, fields=fields)}


def silence_json(silence: Silence) -> dict:
    data = model_to_dict(silence, fields=["rule", "node_glob", "gpu", "comment", "created_by"])
    return {"id": silence.id, **data, "until": silence.until.isoformat()}


def alert_json(alert: Alert) -> dict:
    return {
        "fingerprint": alert.fingerprint,
        "rule": alert.rule.name,
        "severity": alert.rule.severity,
        "node": alert.node,
        "gpu": alert.gpu,
        "status": alert.status,
        "since": alert.status_since.isoformat(),
        "value": alert.value,
    }


class Resource:
    """List/create and read/update/delete views for one model through its form.

    Permission is checked before the object is looked up, so a user without
    it gets 403 whether the id exists or not.
    """

    def __init__(self, access: ModelAccess, to_json):
        self.access, self.to_json = access, to_json
        self.fields = list(access.form_class.base_fields)

    def _save(self, request, form, status):
        if not form.is_valid():
            return _form_error(form)
        obj = form.save()
        self.access.audit(request, "create" if status == 201 else "update", obj)
        payload = {"id": obj.id} if status == 201 else self.to_json(obj)
        if getattr(form, "generated_secret", None):
            payload["secret"] = form.generated_secret  # shown once, never again
        return JsonResponse(payload, status=status)

    def collection(self, request):
        perm = self.access.view_perm if request.method == "GET" else self.access.perm("add")
        if perm and (denied := _denied(request, perm)):
            return denied
        if request.method == "GET":
            return JsonResponse({"results": [self.to_json(o) for o in self.access.model.objects.all()]})
        try:
            data = _body(request, self.fields)
        except BadRequest as exc:
            return _error(str(exc), 400)
        model = self.access.model
        defaults = {k: v for k, v in model_to_dict(model(), fields=self.fields).items() if k != "secret"}
        return self._save(request, self.access.form(request.user, {**defaults, **data}), 201)

    def detail(self, request, pk):
        perms = {"GET": self.access.view_perm, "DELETE": self.access.perm("delete")}
        perm = perms.get(request.method, self.access.perm("change"))
        if perm and (denied := _denied(request, perm)):
            return denied
        obj = self.access.model.objects.filter(pk=pk).first()
        if obj is None:
            return _error(f"no {self.access.model._meta.verbose_name} with id {pk}", 404)
        if request.method == "GET":
            return JsonResponse(self.to_json(obj))
        if request.method == "DELETE":
            self.access.audit(request, "delete", obj)
            obj.delete()
            return HttpResponse(status=204)
        try:
            data = _body(request, self.fields)
        except BadRequest as exc:
            return _error(str(exc), 400)
        current = model_to_dict(obj, fields=self.fields)
        return self._save(request, self.access.form(request.user, {**current, **data}, instance=obj), 200)


rules = Resource(RULES, rule_json)
webhooks = Resource(WEBHOOKS, webhook_json)
silences = Resource(SILENCES, silence_json)


def _views(resource):
    collection = require_http_methods(["GET", "POST"])(resource.collection)
    detail = require_http_methods(["GET", "PATCH", "DELETE"])(resource.detail)
    return collection, detail


rule_list, rule_detail = _views(rules)
webhook_list, webhook_detail = _views(webhooks)
silence_list, silence_detail = _views(silences)


@require_GET
def alert_list(request):
    active = Alert.objects.filter(status__in=(PENDING, FIRING)).select_related("rule").order_by("-status_since")
    alerts = [alert_json(a) for a in active]
    return JsonResponse({"firing": sum(a["status"] == FIRING for a in alerts), "alerts": alerts})


@require_POST
def simulator_faults(request):
    if not request.user.is_staff:
        return _error("permission denied: fault injection is for staff users", 403)
    try:
        data = _body(request, ["node", "gpu", "fault"])
    except BadRequest as exc:
        return _error(str(exc), 400)
    form = FaultForm(data)
    if not form.is_valid():
        return _form_error(form)
    node, gpu, fault = form.cleaned_data["node"], form.cleaned_data["gpu"], form.cleaned_data["fault"]
    try:
        fields = simulator.set_fault(node, gpu, fault)
    except redis.RedisError as exc:
        return _error(f"Redis is unreachable, the fault was not set: {exc}", 503)
    audit(request, "simulator.fault", node if gpu is None else f"{node}/{gpu}", fault=fault)
    return JsonResponse({"node": node, "gpu": gpu, "fault": fault, "fields": fields})
