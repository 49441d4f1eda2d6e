"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.nodes import api

urlpatterns = [
    path("cluster", api.cluster, name="api-cluster"),
    path("nodes/<path:name>", api.node, name="api-node"),
]
