from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "dashboard.retention"
    verbose_name = "History retention"
