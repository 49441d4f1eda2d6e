"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.usage import api

urlpatterns = [
    path("usage", api.usage, name="api-usage"),
]
