from django.urls import path

from dashboard.benchmarks import views

app_name = "benchmarks-api"
urlpatterns = [
    path("benchmarks", views.api_jobs, name="list"),
    path("benchmarks/<int:pk>", views.api_job, name="detail"),
    path("benchmarks/<int:pk>/cancel", views.api_job_cancel, name="cancel"),
]
