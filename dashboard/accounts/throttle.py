"""Login throttling: too many failed logins for a username or from an address
lock further attempts out for a while, across every web process (Redis cache)."""

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.dispatch import receiver


def _keys(username: str, ip: str | None) -> list[str]:
    keys = [f"login-fail:user:{username.lower()}"]
    if ip:
        keys.append(f"login-fail:ip:{ip}")
    return keys


def locked_out(username: str, ip: str | None) -> bool:
    limits = (settings.GPULSE_LOGIN_FAILURES_PER_USER, settings.GPULSE_LOGIN_FAILURES_PER_IP)
    counts = cache.get_many(_keys(username, ip))
    return any(counts.get(key, 0) >= limit for key, limit in zip(_keys(username, ip), limits))


def record_failure(username: str, ip: str | None) -> None:
    for key in _keys(username, ip):
        # add() starts the window on the first failure; incr() keeps its expiry.
        if not cache.add(key, 1, timeout=settings.GPULSE_LOGIN_LOCKOUT_SECONDS):
            try:
                cache.incr(key)
            except ValueError:  # expired between add() and incr()
                cache.add(key, 1, timeout=settings.GPULSE_LOGIN_LOCKOUT_SECONDS)


@receiver(user_login_failed)
def count_failed_login(sender, credentials, request=None, **kwargs):
    ip = request.META.get("REMOTE_ADDR") if request is not None else None
    record_failure(credentials.get("username", ""), ip)
