from django.apps import AppConfig


class HealthzConfig(AppConfig):
    name = "dashboard.healthz"
    verbose_name = "System check (/healthz)"
