"""The simulator page, mounted by the project under "alerts/simulator/" (where operators watch its alerts)."""

from django.urls import path

from dashboard.simulator import views

app_name = "simulator"

urlpatterns = [
    path("", views.panel, name="panel"),
]
