from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "dashboard.usage"
    verbose_name = "Usage and cost"
