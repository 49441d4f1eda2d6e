from django.urls import path

from dashboard.live import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("nodes/<path:name>/", views.node_detail, name="node"),
    path("api/v1/cluster", views.api_cluster, name="api-cluster"),
    path("api/v1/nodes/<path:name>", views.api_node, name="api-node"),
    path("healthz", views.healthz, name="healthz"),
]
