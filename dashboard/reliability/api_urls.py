"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.reliability import api

urlpatterns = [
    path("reliability", api.reliability, name="api-reliability"),
    path("reliability/incidents", api.incidents, name="api-reliability-incidents"),
    path("reliability/plan", api.plan, name="api-reliability-plan"),
    path("reliability/import", api.import_history, name="api-reliability-import"),
]
