"""Who may read and change each alerts model, and the form that validates it.

The HTML pages (views.py) and the JSON API (api.py) both work through these,
so they ask for the same permissions and accept the same input.
"""

from dataclasses import dataclass

from django import forms
from django.db import models

from dashboard.accounts.audit import audit
from dashboard.alerts.forms import RuleForm, SilenceForm, WebhookForm
from dashboard.alerts.models import Rule, Silence, WebhookEndpoint


@dataclass(frozen=True)
class ModelAccess:
    model: type[models.Model]
    form_class: type[forms.ModelForm]
    view_perm: str | None  # None: every logged-in user may read
    pass_user: bool = False  # the form records who saved it

    @property
    def name(self) -> str:
        return self.model._meta.model_name

    def perm(self, action: str) -> str:
        """Return the permission for ``action`` (add, change, delete), e.g. alerts.add_rule."""
        return f"{self.model._meta.app_label}.{action}_{self.name}"

    def form(self, user, *args, **kwargs):
        extra = {"user": user} if self.pass_user else {}
        return self.form_class(*args, **kwargs, **extra)

    def audit(self, request, action: str, obj) -> None:
        audit(request, f"{self.name}.{action}", f"{self.name} {obj.pk}", name=str(obj))


RULES = ModelAccess(Rule, RuleForm, view_perm=None)
# Webhook URLs can carry credentials (Slack's do): reading them needs a permission.
WEBHOOKS = ModelAccess(WebhookEndpoint, WebhookForm, view_perm="alerts.view_webhookendpoint")
SILENCES = ModelAccess(Silence, SilenceForm, view_perm=None, pass_user=True)
