"""HTML pages: alerts, rules, webhooks (with test-send and delivery log)."""

from django.conf import settings
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from dashboard.accounts.audit import audit
from dashboard.alerts import delivery
from dashboard.alerts.access import RULES, SILENCES, WEBHOOKS
from dashboard.alerts.formats import Event
from dashboard.alerts.models import (
    FIRING,
    PENDING,
    RESOLVED,
    Alert,
    DeliveryAttempt,
    Silence,
    Transition,
    WebhookEndpoint,
)
from dashboard.alerts.notices import attach_notices, with_latest_notice
from dashboard.alerts.pages import ModelPages, require

HISTORY_ROWS = 100
LOG_ROWS = 50


def alert_list(request):
    now = timezone.now()
    active = Alert.objects.filter(status__in=(PENDING, FIRING)).select_related("rule").order_by("status_since")
    active = list(with_latest_notice(active))
    for alert in active:
        alert.age = now - alert.status_since
    attach_notices([a for a in active if a.status == FIRING])
    resolved = Transition.objects.filter(new=RESOLVED).select_related("alert__rule")[:HISTORY_ROWS]
    context = {
        "firing": [a for a in active if a.status == FIRING],
        "pending": [a for a in active if a.status == PENDING],
        "resolved": resolved,
        "silences": Silence.objects.filter(until__gt=now).select_related("rule"),
        "silence_form": SILENCES.form(request.user) if request.user.has_perm(SILENCES.perm("add")) else None,
    }
    return render(request, "alerts/list.html", context)


class SilencePages(ModelPages):
    """Silences are listed, and created, on the alerts page; they expire rather than being deleted."""

    access = SILENCES
    list_url = "alerts:list"

    def audit_created(self, request, silence):
        audit(request, "silence.create", silence.scope_text(), until=silence.until.isoformat())

    def created_message(self, form, silence):
        return f"Silenced {silence.scope_text()} until {silence.until:%Y-%m-%d %H:%M} UTC."

    def create_from_alerts_page(self, request):
        silence, form = self.create(request)
        if silence is None:
            messages.error(request, "Silence not created: " + "; ".join(f"{f}: {e[0]}" for f, e in form.errors.items()))
        return redirect(self.list_url)


silence_create = require_POST(SilencePages().create_from_alerts_page)


@require_POST
def silence_expire(request, pk):
    require(request, SILENCES.perm("change"))
    if Silence.objects.filter(pk=pk, until__gt=timezone.now()).update(until=timezone.now()):
        audit(request, "silence.expire", f"silence {pk}")
    messages.success(request, "Silence expired.")
    return redirect("alerts:list")


class RulePages(ModelPages):
    access = RULES
    noun = "Rule"
    list_url = "alerts:rules"
    list_template, edit_template = "alerts/rules.html", "alerts/rule_edit.html"
    list_name, object_name = "rules", "rule"

    def list_context(self) -> dict:
        # A rule may ask for drain on a server where it is off: say so, or it looks like it drains.
        return {"drain_enabled": settings.GPULSE_SLURM_DRAIN}

    def edit_context(self, obj) -> dict:
        return self.list_context()


def _attempt_log(queryset):
    return queryset.select_related("endpoint")[:LOG_ROWS]


class WebhookPages(ModelPages):
    """Webhooks show their delivery log, and open on their own page once created or saved."""

    access = WEBHOOKS
    noun = "Webhook"
    list_url = "alerts:webhooks"
    list_template, edit_template = "alerts/webhooks.html", "alerts/webhook_edit.html"
    list_name, object_name = "endpoints", "endpoint"

    def list_context(self):
        return {"attempts": _attempt_log(DeliveryAttempt.objects.all())}

    def edit_context(self, endpoint):
        return {"attempts": _attempt_log(endpoint.attempts.all())}

    def saved_url(self, endpoint):
        return reverse("alerts:webhook", args=[endpoint.pk])

    def created_message(self, form, endpoint):
        note = f" Its signing secret (shown once): {form.generated_secret}" if form.generated_secret else ""
        return super().created_message(form, endpoint) + note


def _views(pages: ModelPages):
    return pages.list, pages.edit, require_POST(pages.delete)


rules, rule_edit, rule_delete = _views(RulePages())
webhooks, webhook_edit, webhook_delete = _views(WebhookPages())


@require_POST
def webhook_send_test(request, pk):
    """Send a test event now, exactly as a delivery would, and report the outcome."""
    require(request, WEBHOOKS.perm("change"))
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    # A test is sent once and never retried: a temporary failure is logged as given up.
    logged = delivery.attempt(endpoint, Event.test(), 1, last=True)
    if logged.outcome == DeliveryAttempt.OK:
        messages.success(request, f"Test delivered: HTTP {logged.status_code} in {logged.duration_ms:.0f} ms.")
    else:
        messages.error(request, f"Test failed: {logged.error}")
    return redirect("alerts:webhook", pk=endpoint.pk)
