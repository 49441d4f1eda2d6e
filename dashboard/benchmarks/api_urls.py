"""JSON routes, mounted by the project under "api/v1/"."""

from django.urls import path

from dashboard.benchmarks import api, gpu_check_views

app_name = "benchmarks-api"
urlpatterns = [
    path("benchmarks", api.job_list, name="list"),
    path("benchmarks/<int:pk>", api.job_detail, name="detail"),
    path("benchmarks/<int:pk>/cancel", api.job_cancel, name="cancel"),
    path("fabric-sweeps", api.sweep_list, name="sweeps"),
    path("fabric-sweeps/<int:pk>", api.sweep_detail, name="sweep"),
    path("fabric-sweeps/<int:pk>/cancel", api.sweep_cancel, name="sweep-cancel"),
    path("gpu-checks", gpu_check_views.api_run_list, name="gpu-checks"),
    path("gpu-checks/<int:pk>", gpu_check_views.api_run_detail, name="gpu-check"),
    path("gpu-checks/<int:pk>/cancel", gpu_check_views.api_run_cancel, name="gpu-check-cancel"),
]
