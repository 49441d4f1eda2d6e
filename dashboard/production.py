"""Production settings: what GPULSE_ENV=production changes in dashboard/settings.py.

Development defaults stay in settings.py; here they are replaced by
hardened values, and whatever a production deployment must not guess
(SECRET_KEY, ALLOWED_HOSTS, where the database and Redis are) is required
from the environment, so a mistake stops the process at start with one
clear line instead of running insecurely. The result passes
``manage.py check --deploy --fail-level WARNING``.
"""

import os

from django.core.exceptions import ImproperlyConfigured

from dashboard.env import env_bool, env_list, env_str

ENVIRONMENTS = ("development", "production")
MIN_SECRET_KEY_LENGTH = 50  # Django's check --deploy warns below this
MIN_METRICS_TOKEN_LENGTH = 32
ONE_YEAR = 365 * 24 * 3600
# settings.py's development key, and the one `django-admin startproject` writes.
INSECURE_KEY_PREFIXES = ("gpulse-insecure-", "django-insecure-")
GENERATE_HINT = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(50))"'


def select(settings: dict) -> None:
    """Apply the environment named by GPULSE_ENV (development by default) to the settings namespace."""
    name = env_str("GPULSE_ENV") or "development"
    if name not in ENVIRONMENTS:
        raise ImproperlyConfigured(f"GPULSE_ENV must be one of {', '.join(ENVIRONMENTS)}, not {name!r}")
    settings["GPULSE_ENV"] = name
    if name == "production":
        apply(settings)


def _missing(name: str, example: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name} must be set in the environment when GPULSE_ENV=production (e.g. {example})")


def _required(name: str, example: str) -> str:
    value = (os.environ.get(name) or "").strip()
    if not value:
        raise _missing(name, example)
    return value


def _secret_key() -> str:
    key = _required("SECRET_KEY", "a random string of 50+ characters")
    if key.startswith(INSECURE_KEY_PREFIXES):
        raise ImproperlyConfigured(f"SECRET_KEY is the development key; set a secret one ({GENERATE_HINT})")
    if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < 5:
        raise ImproperlyConfigured(
            f"SECRET_KEY is too weak: use at least {MIN_SECRET_KEY_LENGTH} random characters ({GENERATE_HINT})"
        )
    return key


def proxy_ssl_header(value: str) -> tuple[str, str]:
    """Parse "X-Forwarded-Proto=https" (or "HTTP_X_FORWARDED_PROTO=https") into Django's META form."""
    header, sep, expected = value.partition("=")
    header, expected = header.strip(), expected.strip()
    if not sep or not header or not expected:
        raise ImproperlyConfigured(
            f"GPULSE_PROXY_SSL_HEADER must look like X-Forwarded-Proto=https, not {value!r}"
        )
    meta = header.upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}"), expected


def _seconds(name: str, default: int) -> int:
    value = env_str(name)
    if value is None or value == "":
        return default
    try:
        seconds = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number of seconds, not {value!r}") from None
    if seconds < 0:
        raise ImproperlyConfigured(f"{name} must not be negative")
    return seconds


def apply(settings: dict) -> None:
    """Harden the settings namespace (settings.py's globals()) in place."""
    if env_bool("GPULSE_DEBUG", False):
        raise ImproperlyConfigured("GPULSE_DEBUG=true is not allowed with GPULSE_ENV=production")
    settings["DEBUG"] = False
    settings["SECRET_KEY"] = _secret_key()
    settings["ALLOWED_HOSTS"] = env_list("ALLOWED_HOSTS", [])
    if not settings["ALLOWED_HOSTS"]:
        raise _missing("ALLOWED_HOSTS", "gpulse.example.com")
    if "*" in settings["ALLOWED_HOSTS"]:
        # "*" accepts any Host header, and with it any page's origin for a websocket.
        raise ImproperlyConfigured("ALLOWED_HOSTS must name the dashboard's hosts, not '*', when GPULSE_ENV=production")
    settings["CSRF_TRUSTED_ORIGINS"] = env_list("CSRF_TRUSTED_ORIGINS", [])
    # A production web process with an implicit SQLite file or a local Redis
    # would run and lose its data or see no cluster: say so at start instead.
    _required("DATABASE_URL", "postgres://gpulse:PASSWORD@postgres:5432/gpulse")
    _required("REDIS_URL", "redis://:PASSWORD@redis:6379/0")

    settings["SESSION_COOKIE_SECURE"] = True
    settings["CSRF_COOKIE_SECURE"] = True
    settings["SECURE_HSTS_SECONDS"] = _seconds("GPULSE_HSTS_SECONDS", ONE_YEAR)
    settings["SECURE_HSTS_INCLUDE_SUBDOMAINS"] = env_bool("GPULSE_HSTS_INCLUDE_SUBDOMAINS", True)
    settings["SECURE_HSTS_PRELOAD"] = env_bool("GPULSE_HSTS_PRELOAD", True)
    settings["SECURE_SSL_REDIRECT"] = env_bool("GPULSE_SSL_REDIRECT", True)
    # Health probes and Prometheus reach the web process from inside the
    # cluster over plain HTTP and do not follow a redirect to HTTPS.
    settings["SECURE_REDIRECT_EXEMPT"] = [r"^healthz$", r"^metrics$"]
    header = env_str("GPULSE_PROXY_SSL_HEADER")
    if header:
        # Only behind a proxy that sets this header itself: otherwise any client could claim HTTPS.
        settings["SECURE_PROXY_SSL_HEADER"] = proxy_ssl_header(header)
    settings["SECURE_CONTENT_TYPE_NOSNIFF"] = True
    settings["SECURE_REFERRER_POLICY"] = "same-origin"
    settings["X_FRAME_OPTIONS"] = "DENY"
    # Fault injection belongs to a simulated fleet: a real cluster's pages do not offer it unless asked.
    settings["GPULSE_SIMULATOR"] = env_bool("GPULSE_SIMULATOR", False)

    token = settings.get("GPULSE_METRICS_TOKEN") or ""
    if token and len(token) < MIN_METRICS_TOKEN_LENGTH:
        raise ImproperlyConfigured(
            f"GPULSE_METRICS_TOKEN is too short: use at least {MIN_METRICS_TOKEN_LENGTH} random characters"
        )
