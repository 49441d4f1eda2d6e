from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "dashboard.scheduler"
    verbose_name = "Scheduler (Slurm drain)"

    def ready(self):
        # Imported here: models load only once every app is ready.
        from dashboard.alerts import hooks as alert_hooks
        from dashboard.scheduler.hooks import drain_or_resume

        alert_hooks.register(drain_or_resume)
