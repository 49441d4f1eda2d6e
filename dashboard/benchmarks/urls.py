from django.urls import path

from dashboard.benchmarks import gpu_check_views, views

app_name = "benchmarks"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("compare/", views.job_compare, name="compare"),
    path("fabric/", views.sweep_list, name="sweeps"),
    path("fabric/<int:pk>/", views.sweep_detail, name="sweep"),
    path("fabric/<int:pk>/cancel/", views.sweep_cancel, name="sweep-cancel"),
    path("gpu-checks/", gpu_check_views.run_list, name="gpu-checks"),
    path("gpu-checks/<int:pk>/", gpu_check_views.run_detail, name="gpu-check"),
    path("gpu-checks/<int:pk>/cancel/", gpu_check_views.run_cancel, name="gpu-check-cancel"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/cancel/", views.job_cancel, name="cancel"),
]
