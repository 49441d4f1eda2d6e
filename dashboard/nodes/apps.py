from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "dashboard.nodes"
    verbose_name = "Overview and node pages"
