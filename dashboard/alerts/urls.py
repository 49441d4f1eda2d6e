from django.urls import path

from dashboard.alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.alert_list, name="list"),
    path("nodes/<path:node>/", views.node_panel, name="node_panel"),
    path("silences/", views.silence_create, name="silence_create"),
    path("silences/<int:pk>/expire", views.silence_expire, name="silence_expire"),
    path("rules/", views.rules, name="rules"),
    path("rules/<int:pk>/", views.rule_edit, name="rule"),
    path("rules/<int:pk>/delete", views.rule_delete, name="rule_delete"),
    path("webhooks/", views.webhooks, name="webhooks"),
    path("webhooks/<int:pk>/", views.webhook_edit, name="webhook"),
    path("webhooks/<int:pk>/delete", views.webhook_delete, name="webhook_delete"),
    path("webhooks/<int:pk>/test", views.webhook_send_test, name="webhook_test"),
]
