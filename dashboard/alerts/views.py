"""HTML pages: alerts, rules, webhooks (with test-send and delivery log)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from dashboard.accounts.audit import audit
from dashboard.alerts import delivery
from dashboard.alerts.formats import Event
from dashboard.alerts.forms import RuleForm, SilenceForm, WebhookForm
from dashboard.alerts.models import (
    FIRING,
    PENDING,
    RESOLVED,
    Alert,
    DeliveryAttempt,
    Rule,
    Silence,
    Transition,
    WebhookEndpoint,
)

HISTORY_ROWS = 100
LOG_ROWS = 50


def _require(request, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"you need the permission {perm}")


def alert_list(request):
    now = timezone.now()
    active = list(Alert.objects.filter(status__in=(PENDING, FIRING)).select_related("rule").order_by("status_since"))
    for alert in active:
        alert.age = now - alert.status_since
    resolved = Transition.objects.filter(new=RESOLVED).select_related("alert__rule")[:HISTORY_ROWS]
    context = {
        "firing": [a for a in active if a.status == FIRING],
        "pending": [a for a in active if a.status == PENDING],
        "resolved": resolved,
        "silences": Silence.objects.filter(until__gt=now).select_related("rule"),
        "silence_form": SilenceForm() if request.user.has_perm("alerts.add_silence") else None,
    }
    return render(request, "alerts/list.html", context)


@require_POST
def silence_create(request):
    _require(request, "alerts.add_silence")
    form = SilenceForm(request.POST, user=request.user)
    if form.is_valid():
        silence = form.save()
        audit(request, "silence.create", silence.scope_text(), until=silence.until.isoformat())
        messages.success(request, f"Silenced {silence.scope_text()} until {silence.until:%Y-%m-%d %H:%M} UTC.")
    else:
        messages.error(request, "Silence not created: " + "; ".join(f"{f}: {e[0]}" for f, e in form.errors.items()))
    return redirect("alerts:list")


@require_POST
def silence_expire(request, pk):
    _require(request, "alerts.change_silence")
    if Silence.objects.filter(pk=pk, until__gt=timezone.now()).update(until=timezone.now()):
        audit(request, "silence.expire", f"silence {pk}")
    messages.success(request, "Silence expired.")
    return redirect("alerts:list")


def rules(request):
    form = RuleForm()
    if request.method == "POST":
        _require(request, "alerts.add_rule")
        form = RuleForm(request.POST)
        if form.is_valid():
            rule = form.save()
            audit(request, "rule.create", f"rule {rule.pk}", name=rule.name)
            messages.success(request, f"Rule “{rule.name}” created.")
            return redirect("alerts:rules")
    context = {
        "rules": Rule.objects.all(),
        "form": form if request.user.has_perm("alerts.add_rule") else None,
    }
    return render(request, "alerts/rules.html", context)


def rule_edit(request, pk):
    rule = get_object_or_404(Rule, pk=pk)
    form = RuleForm(instance=rule)
    if request.method == "POST":
        _require(request, "alerts.change_rule")
        form = RuleForm(request.POST, instance=rule)
        if form.is_valid():
            form.save()
            audit(request, "rule.update", f"rule {rule.pk}", name=rule.name)
            messages.success(request, f"Rule “{rule.name}” saved.")
            return redirect("alerts:rules")
    return render(request, "alerts/rule_edit.html", {"rule": rule, "form": form})


@require_POST
def rule_delete(request, pk):
    _require(request, "alerts.delete_rule")
    rule = get_object_or_404(Rule, pk=pk)
    audit(request, "rule.delete", f"rule {rule.pk}", name=rule.name)
    rule.delete()
    messages.success(request, f"Rule “{rule.name}” deleted.")
    return redirect("alerts:rules")


def _attempt_log(queryset):
    return queryset.select_related("endpoint")[:LOG_ROWS]


def webhooks(request):
    _require(request, "alerts.view_webhookendpoint")
    form = WebhookForm()
    if request.method == "POST":
        _require(request, "alerts.add_webhookendpoint")
        form = WebhookForm(request.POST)
        if form.is_valid():
            endpoint = form.save()
            audit(request, "webhookendpoint.create", f"webhookendpoint {endpoint.pk}", name=endpoint.name)
            note = f" Its signing secret (shown once): {form.generated_secret}" if form.generated_secret else ""
            messages.success(request, f"Webhook “{endpoint.name}” created.{note}")
            return redirect("alerts:webhook", pk=endpoint.pk)
    context = {
        "endpoints": WebhookEndpoint.objects.all(),
        "form": form if request.user.has_perm("alerts.add_webhookendpoint") else None,
        "attempts": _attempt_log(DeliveryAttempt.objects.all()),
    }
    return render(request, "alerts/webhooks.html", context)


def webhook_edit(request, pk):
    _require(request, "alerts.view_webhookendpoint")
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    form = WebhookForm(instance=endpoint)
    if request.method == "POST":
        _require(request, "alerts.change_webhookendpoint")
        form = WebhookForm(request.POST, instance=endpoint)
        if form.is_valid():
            form.save()
            audit(request, "webhookendpoint.update", f"webhookendpoint {endpoint.pk}", name=endpoint.name)
            messages.success(request, f"Webhook “{endpoint.name}” saved.")
            return redirect("alerts:webhook", pk=endpoint.pk)
    context = {"endpoint": endpoint, "form": form, "attempts": _attempt_log(endpoint.attempts.all())}
    return render(request, "alerts/webhook_edit.html", context)


@require_POST
def webhook_delete(request, pk):
    _require(request, "alerts.delete_webhookendpoint")
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    audit(request, "webhookendpoint.delete", f"webhookendpoint {endpoint.pk}", name=endpoint.name)
    endpoint.delete()
    messages.success(request, f"Webhook “{endpoint.name}” deleted.")
    return redirect("alerts:webhooks")


@require_POST
def webhook_send_test(request, pk):
    """Send a test event now, exactly as a delivery would, and report the outcome."""
    _require(request, "alerts.change_webhookendpoint")
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    logged = delivery.attempt(endpoint, Event.test(), 1)
    if logged.outcome == DeliveryAttempt.OK:
        messages.success(request, f"Test delivered: HTTP {logged.status_code} in {logged.duration_ms:.0f} ms.")
    else:
        messages.error(request, f"Test failed: {logged.error}")
    return redirect("alerts:webhook", pk=endpoint.pk)
