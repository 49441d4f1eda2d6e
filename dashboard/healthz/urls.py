from django.urls import path

from dashboard.healthz import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
]
