from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard import metrics

# Password reset is left out: it needs outgoing mail, which gpulse does not
# configure (an admin resets a password with `manage.py changepassword`).
account_urls = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
]

# Fault injection for a simulated fleet: absent (404) unless GPULSE_SIMULATOR, which production leaves off.
simulator_urls = [
    path("alerts/simulator/", include("dashboard.simulator.urls")),
    path("api/v1/", include("dashboard.simulator.api_urls")),
]

urlpatterns = [
    *account_urls,
    path("admin/", admin.site.urls),
    *(simulator_urls if settings.GPULSE_SIMULATOR else []),
    path("alerts/", include("dashboard.alerts.urls")),
    path("benchmarks/", include("dashboard.benchmarks.urls")),
    path("api/v1/", include("dashboard.benchmarks.api_urls")),
    path("api/v1/", include("dashboard.alerts.api_urls")),
    # Before nodes', whose nodes/<path:name> would take "n1/health" as a node's name.
    path("api/v1/", include("dashboard.health.api_urls")),
    path("api/v1/", include("dashboard.nodes.api_urls")),
    path("api/v1/", include("dashboard.usage.api_urls")),
    path("api/v1/", include("dashboard.reliability.api_urls")),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("usage/", include("dashboard.usage.urls")),
    path("reliability/", include("dashboard.reliability.urls")),
    path("health/", include("dashboard.health.urls")),
    path("", include("dashboard.healthz.urls")),
    path("", include("dashboard.nodes.urls")),
]
