from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "dashboard.scheduler"
    verbose_name = "Scheduler (Slurm drain)"
