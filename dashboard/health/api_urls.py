"""JSON routes, mounted by the project under "api/v1/" (before the live app's: see dashboard/urls.py)."""

from django.urls import path

from dashboard.health import api

urlpatterns = [
    path("health", api.health, name="api-health"),
    path("nodes/<path:name>/health", api.node_health, name="api-node-health"),
]
