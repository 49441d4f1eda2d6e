"""JSON API for rules, webhooks, silences and alerts.

Authentication is global (session or Bearer, dashboard.accounts.middleware);
session POSTs keep Django's CSRF check. Writes need the model permissions
(alerts.add_rule, alerts.change_webhookendpoint, ...).
"""

from django.forms.models import model_to_dict
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.alerts.access import RULES, SILENCES, WEBHOOKS, ModelAccess
from dashboard.alerts.forms import RuleForm, WebhookForm
from dashboard.alerts.models import FIRING, PENDING, Alert, Rule, Silence, WebhookEndpoint
from dashboard.json_api import BadRequest, form_error, json_body, json_error


def _denied(request, perm: str) -> JsonResponse | None:
    if request.user.has_perm(perm):
        return None
    return json_error(f"permission denied: you need {perm}", 403)


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
            return form_error(form)
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
            data = json_body(request, self.fields)
        except BadRequest as exc:
            return json_error(str(exc), 400)
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
            return json_error(f"no {self.access.model._meta.verbose_name} with id {pk}", 404)
        if request.method == "GET":
            return JsonResponse(self.to_json(obj))
        if request.method == "DELETE":
            self.access.audit(request, "delete", obj)
            obj.delete()
            return HttpResponse(status=204)
        try:
            data = json_body(request, self.fields)
        except BadRequest as exc:
            return json_error(str(exc), 400)
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
