from django.urls import path

from dashboard.live import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("health/", views.health_list, name="health"),
    path("nodes/<path:name>/", views.node_detail, name="node"),
    path("healthz", views.healthz, name="healthz"),
]
