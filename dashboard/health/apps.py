from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "dashboard.health"
    verbose_name = "Node health"
