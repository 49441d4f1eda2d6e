"""HTML pages: alerts, rules, webhooks (with test-send and delivery log)."""

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.accounts.audit import audit
from dashboard.alerts import delivery, generation, words
from dashboard.alerts.access import RULES, SILENCES, WEBHOOKS
from dashboard.alerts.formats import Event
from dashboard.alerts.groups import rule_groups
from dashboard.alerts.models import (
    FIRING,
    PENDING,
    RESOLVED,
    DeliveryAttempt,
    Silence,
    Transition,
    WebhookEndpoint,
)
from dashboard.alerts.pages import ModelPages, confirm, count, require
from dashboard.alerts.templatetags.node_alerts import node_alerts_data
from dashboard.live.templatetags.local_time import local_time

HISTORY_ROWS = 100
LOG_ROWS = 50


def _number(text: str | None) -> int | None:
    """Return a query parameter as a number; None when it is missing or not one (a hand-edited URL)."""
    try:
        return int(text or "")
    except ValueError:
        return None


def alert_list(request):
    """The alerts grouped by rule; ``?rule=<id>&page=<n>`` pages through one rule's group."""
    now = timezone.now()
    groups = rule_groups(_number(request.GET.get("rule")), _number(request.GET.get("page")) or 1)
    resolved = Transition.objects.filter(new=RESOLVED).select_related("alert__rule")[:HISTORY_ROWS]
    context = {
        "groups": groups,
        "firing": sum(g.firing for g in groups),
        "pending": sum(g.pending for g in groups),
        "resolved": resolved,
        "silences": Silence.objects.filter(until__gt=now).select_related("rule"),
        "silence_form": SILENCES.form(request.user) if request.user.has_perm(SILENCES.perm("add")) else None,
    }
    return render(request, "alerts/list.html", context)


@require_GET
def node_panel(request, node: str):
    """The node page's Alerts section alone, as the page renders it: node-alerts.js fetches it
    again every few seconds, so alerts that fire or resolve show without a reload."""
    return render(request, "alerts/_node_alerts.html", node_alerts_data(node))


class SilencePages(ModelPages):
    """Silences are listed, and created, on the alerts page; they expire rather than being deleted."""

    access = SILENCES
    list_url = "alerts:list"

    def audit_created(self, request, silence):
        audit(request, "silence.create", silence.scope_text(), until=silence.until.isoformat())

    def created_message(self, form, silence):
        # Safe markup, which Django's messages keep: its end in the browser's zone, as every time on the pages.
        return format_html("Silenced {} until {}.", silence.scope_text(), local_time(silence.until, "minute"))

    def create_from_alerts_page(self, request):
        silence, form = self.create(request)
        if silence is None:
            messages.error(request, "Silence not created: " + "; ".join(f"{f}: {e[0]}" for f, e in form.errors.items()))
        return redirect(self.list_url)


silence_create = require_POST(SilencePages().create_from_alerts_page)


@require_http_methods(["GET", "POST"])
def silence_expire(request, pk):
    """Ask first (GET), saying what it ends; expire on the answer (POST)."""
    require(request, SILENCES.perm("change"))
    if request.method != "POST":
        silence = get_object_or_404(Silence.objects.select_related("rule"), pk=pk, until__gt=timezone.now())
        ends = format_html("the silence, set to last until {}: what it mutes notifies again",
                           local_time(silence.until, "minute"))
        question = f"Expire the silence of {silence.scope_text()}?"
        return confirm(request, question, [ends], "Expire silence", "alerts:list")
    if Silence.objects.filter(pk=pk, until__gt=timezone.now()).update(until=timezone.now()):
        generation.bump()  # an update sends no signal: tell the evaluator here
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

    def edit_context(self, rule) -> dict:
        return {**self.list_context(), "summary": words.summary(rule)}

    def removes(self, rule):
        alerts = rule.alerts.aggregate(
            total=Count("id"),
            firing=Count("id", filter=Q(status=FIRING)),
            pending=Count("id", filter=Q(status=PENDING)),
        )
        active = f"{alerts['firing']} firing, {alerts['pending']} pending"
        return [f"{count(alerts['total'], 'alert')} ({active}) and their history",
                f"{count(rule.silences.count(), 'silence')} of this rule"]


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

    def removes(self, endpoint):
        return [f"its delivery log ({count(endpoint.attempts.count(), 'attempt')})"]

    def saved_url(self, endpoint):
        return reverse("alerts:webhook", args=[endpoint.pk])

    def created_message(self, form, endpoint):
        note = f" Its signing secret (shown once): {form.generated_secret}" if form.generated_secret else ""
        return super().created_message(form, endpoint) + note


def _views(pages: ModelPages):
    return pages.list, pages.edit, require_http_methods(["GET", "POST"])(pages.delete)


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
