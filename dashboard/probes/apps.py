from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "dashboard.probes"
    verbose_name = "Bandwidth probes"
