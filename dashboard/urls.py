from django.contrib import admin
from django.urls import include, path

from dashboard import metrics
from dashboard.accounts.views import LoginView

urlpatterns = [
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("alerts/simulator/", include("dashboard.simulator.urls")),
    path("alerts/", include("dashboard.alerts.urls")),
    path("benchmarks/", include("dashboard.benchmarks.urls")),
    path("api/v1/", include("dashboard.benchmarks.api_urls")),
    path("api/v1/", include("dashboard.alerts.api_urls")),
    path("api/v1/", include("dashboard.live.api_urls")),
    path("api/v1/", include("dashboard.simulator.api_urls")),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("", include("dashboard.live.urls")),
]
