from django.contrib import admin

from dashboard.alerts.models import Alert, DeliveryAttempt, Notification, Rule, Silence, Transition, WebhookEndpoint


@admin.register(Rule)
class RuleAdmin(admin.ModelAdmin):
    list_display = (
        "name", "metric", "comparison", "threshold", "for_seconds", "node_glob", "gpu_index", "severity", "enabled"
    )
    list_filter = ("enabled", "severity", "metric")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("rule", "node", "gpu", "status", "status_since", "value", "notified")
    list_filter = ("status",)
    readonly_fields = [f.name for f in Alert._meta.fields]


@admin.register(Transition)
class TransitionAdmin(admin.ModelAdmin):
    list_display = ("alert", "old", "new", "reason", "created", "notify", "processed", "notification")
    readonly_fields = [f.name for f in Transition._meta.fields]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("node", "event_id", "created", "updated", "processed")
    readonly_fields = [f.name for f in Notification._meta.fields]


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ("rule", "node_glob", "gpu", "until", "created_by", "comment")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ("name", "url", "format", "enabled", "min_severity")
    # The secret is needed to sign but is never shown back.
    exclude = ("secret",)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(admin.ModelAdmin):
    list_display = (
        "endpoint", "kind", "event_id", "alerts", "attempt", "status_code", "outcome", "duration_ms", "created"
    )
    list_filter = ("outcome",)
    readonly_fields = [f.name for f in DeliveryAttempt._meta.fields]
