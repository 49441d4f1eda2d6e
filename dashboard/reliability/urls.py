from django.urls import path

from dashboard.reliability import views

app_name = "reliability"

urlpatterns = [
    path("", views.reliability_page, name="page"),
]
