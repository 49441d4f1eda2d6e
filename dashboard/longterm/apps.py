from django.apps import AppConfig


class LongTermConfig(AppConfig):
    name = "dashboard.longterm"
    verbose_name = "Long-term storage"
