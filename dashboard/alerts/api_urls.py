"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.alerts import api

urlpatterns = [
    path("rules", api.rule_list, name="api-rules"),
    path("rules/<int:pk>", api.rule_detail, name="api-rule"),
    path("webhooks", api.webhook_list, name="api-webhooks"),
    path("webhooks/<int:pk>", api.webhook_detail, name="api-webhook"),
    path("silences", api.silence_list, name="api-silences"),
    path("silences/<int:pk>", api.silence_detail, name="api-silence"),
    path("alerts", api.alert_list, name="api-alerts"),
]
