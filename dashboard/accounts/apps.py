from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "dashboard.accounts"
    label = "accounts"

    def ready(self):
        from dashboard.accounts import throttle  # noqa: F401  (connects the failed-login counter)
