from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "dashboard.alerts"
    label = "alerts"

    def ready(self):
        from dashboard.alerts import generation

        generation.connect()
