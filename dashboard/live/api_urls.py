"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.live import api

urlpatterns = [
    path("cluster", api.cluster, name="api-cluster"),
    path("health", api.health, name="api-health"),
    # Before nodes/<path:name>, which would take "n1/health" as a node's name.
    path("nodes/<path:name>/health", api.node_health, name="api-node-health"),
    path("nodes/<path:name>", api.node, name="api-node"),
]
