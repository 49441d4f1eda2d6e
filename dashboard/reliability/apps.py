from django.apps import AppConfig


class ReliabilityConfig(AppConfig):
    name = "dashboard.reliability"
