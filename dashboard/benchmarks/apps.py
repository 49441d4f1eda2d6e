from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "dashboard.benchmarks"
    label = "benchmarks"
