from django.urls import path

from dashboard.benchmarks import views

app_name = "benchmarks"
urlpatterns = [
    path("", views.job_list, name="list"),
]
