from django.urls import path

from dashboard.nodes import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("nodes/<path:name>/", views.node_detail, name="node"),
]
