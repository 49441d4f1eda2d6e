from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    name = "dashboard.simulator"
    label = "simulator"
