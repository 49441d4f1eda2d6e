"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.simulator import api

urlpatterns = [
    path("simulator/faults", api.fault, name="api-simulator-faults"),
]
