"""Settings for gpulse: one env-driven file with development defaults."""

from pathlib import Path

import dj_database_url
import plotly
from csp.constants import NONE, SELF

from dashboard import production
from dashboard.env import env_bool, env_float, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("GPULSE_DEBUG", False)
# Development only: production deployments set SECRET_KEY in the environment.
SECRET_KEY = env_str("SECRET_KEY") or "gpulse-insecure-development-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "dashboard.accounts",
    "dashboard.live",
    "dashboard.benchmarks",
    "dashboard.alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dashboard.accounts.middleware.BearerTokenMiddleware",
    "dashboard.accounts.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.alerts.context_processors.firing_alerts",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=60,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Ingest, web and the control worker write concurrently: WAL and a busy
    # timeout keep SQLite from answering "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # Plotly.js from the installed plotly package: no CDN, clusters are often air-gapped.
    ("vendor/plotly", Path(plotly.__file__).parent / "package_data"),
]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Content-Security-Policy (django-csp): the pages show strings that GPU nodes
# send, so even a value that escaped escaping must not run. Scripts and styles
# come only from our static files (page data through json_script, which is not
# executed); Plotly's base styles are linked as static/gpulse/plotly.css, which
# stops it injecting a <style> element. 'self' in connect-src covers the
# websockets of the same host and port (CSP Level 3, as Chromium and Firefox do).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "connect-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

REDIS_URL = env_str("REDIS_URL") or "redis://127.0.0.1:6379/0"
GPULSE_REDIS_PREFIX = env_str("GPULSE_REDIS_PREFIX", "gpulse:")

# Shared by every web process: login throttling counts failures here.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"{GPULSE_REDIS_PREFIX}cache",
    }
}
GPULSE_LOGIN_FAILURES_PER_USER = 5
GPULSE_LOGIN_FAILURES_PER_IP = 20
GPULSE_LOGIN_LOCKOUT_SECONDS = 900

# Pub/sub layer: ingest publishes one frame per tick to a group, and Redis
# fans it out once per web process instead of once per browser.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{GPULSE_REDIS_PREFIX}asgi"},
    }
}

# Seconds between ingest ticks: one coalesced frame per tick to browsers.
GPULSE_TICK = env_float("GPULSE_TICK", 1.0)
# Seconds of ingest lag past which /healthz reports ingest as failing.
GPULSE_INGEST_MAX_LAG = env_float("GPULSE_INGEST_MAX_LAG", 10.0)

# A node whose newest bandwidth probe is this fraction below its own median is flagged.
GPULSE_PROBE_LOW_FRACTION = env_float("GPULSE_PROBE_LOW_FRACTION", 0.2)

# Benchmarks: where ranks meet (default: the job's first node, by name), the
# port range to pick from, and the launch rate per user ("count/seconds").
GPULSE_RENDEZVOUS_ADDR = env_str("GPULSE_RENDEZVOUS_ADDR", "")
GPULSE_RENDEZVOUS_PORTS = tuple(int(p) for p in env_str("GPULSE_RENDEZVOUS_PORTS", "29500-29999").split("-"))
GPULSE_BENCHMARK_RATE = env_str("GPULSE_BENCHMARK_RATE", "10/600")

# Webhooks: loopback, private, link-local and other non-global targets are
# refused unless allowed, all of them or a list of networks (CIDR).
GPULSE_WEBHOOK_ALLOW_PRIVATE = env_bool("GPULSE_WEBHOOK_ALLOW_PRIVATE", False)
GPULSE_WEBHOOK_ALLOWED_NETWORKS = env_list("GPULSE_WEBHOOK_ALLOWED_NETWORKS", [])
# The dashboard's public address, for links in notifications (Alertmanager's externalURL).
GPULSE_EXTERNAL_URL = env_str("GPULSE_EXTERNAL_URL", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("GPULSE_LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# Bearer token Prometheus sends to /metrics; unset: /metrics needs a login like every page.
GPULSE_METRICS_TOKEN = env_str("GPULSE_METRICS_TOKEN", "")

# GPULSE_ENV=production hardens everything above (dashboard/production.py); last, so it wins.
production.select(globals())
