"""Settings for gpulse: one env-driven file with development defaults."""

import datetime as dt
import re
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from dashboard import production
from dashboard.env import env_bool, env_float, env_int, env_list, env_str
from gpulse.activity import SM_IDLE_FOR
from gpulse.keys import DEFAULT_PREFIX, DEFAULT_REDIS_URL, Keys
from gpulse.sweep_spec import DEFAULT_MAX_BYTES

BASE_DIR = Path(__file__).resolve().parent.parent
# The one Plotly.js the pages load (templates/plotly.html); devtools/plotly_css.py reads its styles.
PLOTLY_JS = BASE_DIR / "vendor/plotly/dist/plotly-gpulse.min.js"
UPLOT_DIST = BASE_DIR / "vendor/uplot/dist"

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
    "dashboard.nodes",
    "dashboard.healthz",
    "dashboard.health",
    "dashboard.probes",
    "dashboard.benchmarks",
    "dashboard.alerts",
    "dashboard.scheduler",
    "dashboard.usage",
    "dashboard.simulator",
    "dashboard.reliability",
    "dashboard.retention",
    "dashboard.longterm",
    "axes",
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
    # Last, as django-axes asks: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
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

# Seconds a SQLite writer waits for another's lock before failing ("database is locked").
GPULSE_SQLITE_BUSY_TIMEOUT = env_float("GPULSE_SQLITE_BUSY_TIMEOUT", 20.0, minimum=0)
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=60,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Ingest, web and the control worker write concurrently: WAL and a busy
    # timeout keep SQLite from answering "database is locked". Temporary tables
    # (rollup_store.merge's, every 5 s) and sorts stay in memory.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": GPULSE_SQLITE_BUSY_TIMEOUT,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every place a password is set runs these: the password change page, the admin's user forms,
# createsuperuser and changepassword, and ensure_admin (GPULSE_ADMIN_PASSWORD). The admin can
# launch jobs on every node: "password" or "12345678" must not be one.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Every login form (ours and /admin/login/) authenticates through axes first,
# which refuses a locked-out (username, address) before the password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
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
    # Plotly.js as `make plotly-js` builds it (the Dockerfile's plotly-js stage in images):
    # no CDN, clusters are often air-gapped.
    ("vendor/plotly", PLOTLY_JS.parent),
    # uPlot as `make uplot-js` installs it (the Dockerfile's uplot-js stage).
    ("vendor/uplot", UPLOT_DIST),
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

REDIS_URL = env_str("REDIS_URL") or DEFAULT_REDIS_URL
GPULSE_REDIS_PREFIX = env_str("GPULSE_REDIS_PREFIX", DEFAULT_PREFIX)
_redis_keys = Keys(GPULSE_REDIS_PREFIX)

# Shared by every web process: the login lockout counts failures here.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": _redis_keys.cache_prefix,
    }
}

# Login lockout (django-axes): 5 failures for one username from one client
# address lock that pair out for 15 minutes. The address is REMOTE_ADDR: behind
# a proxy, uvicorn must trust it (--forwarded-allow-ips, GPULSE_FORWARDED_ALLOW_IPS)
# or every client shares the proxy's address.
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = dt.timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_USERNAME_CALLABLE = "dashboard.accounts.lockout.lockout_username"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# The cache handler keeps no attempt rows: the admin would show empty tables.
AXES_ENABLE_ADMIN = False

# Pub/sub layer: ingest publishes one frame per tick to a group, and Redis
# fans it out once per web process instead of once per browser.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": _redis_keys.channels_prefix},
    }
}

# Seconds between ingest ticks: one coalesced frame per tick to browsers.
GPULSE_TICK = env_float("GPULSE_TICK", 1.0)
# Seconds of ingest lag past which /healthz reports ingest as failing.
GPULSE_INGEST_MAX_LAG = env_float("GPULSE_INGEST_MAX_LAG", 10.0)
# Ingest merges the minute rollups it gathered into the database this often (seconds),
# and acknowledges stream entries only then, or with usage accounting on, once their usage
# is written too (GPULSE_USAGE_FLUSH_INTERVAL; dashboard/rollups/accumulator.py).
GPULSE_ROLLUP_FLUSH_INTERVAL = env_float("GPULSE_ROLLUP_FLUSH_INTERVAL", 5.0, minimum=0.1)
# During a database outage: at most this many (node, gpu, minute) rollup rows wait in
# memory (oldest minute dropped and counted past it; 8,000 GPUs x 60 minutes) ...
GPULSE_ROLLUP_MAX_ROWS = env_int("GPULSE_ROLLUP_MAX_ROWS", 500_000, minimum=1)
# ... and at most this many stream entries wait unacknowledged (past it, the oldest are
# acknowledged before their rollups and usage are written, and counted).
GPULSE_INGEST_MAX_UNACKED = env_int("GPULSE_INGEST_MAX_UNACKED", 200_000, minimum=1)

# A node whose newest bandwidth probe is this fraction below its own median is flagged.
GPULSE_PROBE_LOW_FRACTION = env_float("GPULSE_PROBE_LOW_FRACTION", 0.2)
# Usage accounting (gpulse/usage.py, dashboard/usage/). Off: ingest keeps no usage (no per-minute
# sums, energy or idle list) and the usage page says so; for a site that accounts elsewhere, and to
# measure what accounting costs. A GPU is busy at or above GPULSE_BUSY_SM_ACTIVITY (% SM activity) where
# it reports SM activity, else at or above GPULSE_BUSY_UTIL (% utilization); prices default from the
# environment until set in the admin.
GPULSE_USAGE_ACCOUNTING = env_bool("GPULSE_USAGE_ACCOUNTING", True)
# Ingest writes the usage this often (seconds; with a rollup write), not at every rollup write:
# each write is a row per GPU, which at 8,000 GPUs every 5 s was most of what accounting cost.
# Stream entries stay pending until their usage is written, so a crash loses nothing: keep it
# well under what a node's telemetry stream holds (gpulse/keys.py TELEMETRY_MAXLEN: 2 minutes
# at 1 Hz) and GPULSE_INGEST_MAX_UNACKED entries.
GPULSE_USAGE_FLUSH_INTERVAL = env_float("GPULSE_USAGE_FLUSH_INTERVAL", 60.0, minimum=0.1)
GPULSE_BUSY_UTIL = env_float("GPULSE_BUSY_UTIL", 5.0, minimum=0.0, maximum=100.0)
GPULSE_BUSY_SM_ACTIVITY = env_float("GPULSE_BUSY_SM_ACTIVITY", 10.0, minimum=0.0, maximum=100.0)
# Seconds a GPU's samples must run kernels with its SMs idle before it is flagged "SM IDLE" (gpulse/activity.py).
GPULSE_SM_IDLE_FOR = env_float("GPULSE_SM_IDLE_FOR", SM_IDLE_FOR, minimum=1.0)
# Seconds a GPU must stay allocated and idle (same owner) before /usage/, its API and the overview's
# KPI count it: a checkpoint's dip of a few seconds is not an idle allocation (dashboard/usage/idle.py).
GPULSE_IDLE_MIN_SECONDS = env_float("GPULSE_IDLE_MIN_SECONDS", 600.0, minimum=0.0)
GPULSE_PRICE_GPU_HOUR = env_float("GPULSE_PRICE_GPU_HOUR", 2.5, minimum=0.0)
GPULSE_PRICE_KWH = env_float("GPULSE_PRICE_KWH", 0.15, minimum=0.0)
# The features that ride on ingest, in the order they run each tick (dashboard/live/stages.py); named here, so the
# live app imports none of them. A stage left out is not run: the frames lose its keys, the rest goes on.
GPULSE_INGEST_STAGES = env_list("GPULSE_INGEST_STAGES", [
    "dashboard.health.stage.HealthStage",
    "dashboard.probes.stage.ProbeStage",
    "dashboard.usage.stage.IdleStage",
    "dashboard.activity.stage.SmIdleStage",
    "dashboard.alerts.stage.AlertStage",
    "dashboard.reliability.stage.IncidentStage",
    "dashboard.benchmarks.stage.BenchmarkSummaryStage",
    "dashboard.benchmarks.diagnostics_stage.FabricDiagnosticsStage",
    "dashboard.longterm.stage.RemoteWriteStage",
    # Last: its database write follows the others', and entries are acknowledged after it.
    "dashboard.rollups.stage.RollupStage",
])
# Seconds a node's clock may differ from Redis' before it is flagged "clock skew"
# and its samples are placed at their arrival time.
GPULSE_MAX_CLOCK_SKEW = env_float("GPULSE_MAX_CLOCK_SKEW", 30.0, minimum=1.0)
# A node down this long (seconds) opens a reliability incident (dashboard/reliability/tracker.py).
GPULSE_INCIDENT_MIN_DOWN = env_float("GPULSE_INCIDENT_MIN_DOWN", 120.0, minimum=0.0)
# Seconds a node may stay down before ingest forgets it (known nodes, recent points, frames).
GPULSE_NODE_FORGET_AFTER = env_float("GPULSE_NODE_FORGET_AFTER", 7 * 86400.0, minimum=60.0)
# Seconds an ingest consumer with nothing pending may stay idle before it is removed from the group.
GPULSE_INGEST_CONSUMER_FORGET_AFTER = env_float("GPULSE_INGEST_CONSUMER_FORGET_AFTER", 3600.0, minimum=60.0)

# History retention (dashboard/retention/, docs/retention.md): every GPULSE_RETENTION_INTERVAL seconds the
# cluster's one `celery beat` sends a pass, and a control worker computes the hourly rollups from the minute
# ones and deletes, in batches, the rows older than each table's retention, in days (0: kept for ever).
# Minute rows go only once their hour is computed.
GPULSE_RETENTION_INTERVAL = env_float("GPULSE_RETENTION_INTERVAL", 300.0, minimum=1.0)
GPULSE_RETAIN_MINUTES_DAYS = env_int("GPULSE_RETAIN_MINUTES_DAYS", 14, minimum=0)
GPULSE_RETAIN_HOURS_DAYS = env_int("GPULSE_RETAIN_HOURS_DAYS", 400, minimum=0)
# GpuUsage, the per-GPU minute usage nothing shows; UsageHour and ClusterUsage, which /usage/ reads over
# ranges of up to 400 days (its tables and its chart).
GPULSE_RETAIN_USAGE_MINUTES_DAYS = env_int("GPULSE_RETAIN_USAGE_MINUTES_DAYS", 14, minimum=0)
GPULSE_RETAIN_USAGE_DAYS = env_int("GPULSE_RETAIN_USAGE_DAYS", 400, minimum=0)
# Alert transitions and their notification groups (each alert's latest kept), webhook delivery attempts,
# the audit log, health verdict changes, and watched reliability incidents (resolved) with their node-hours.
GPULSE_RETAIN_ALERT_HISTORY_DAYS = env_int("GPULSE_RETAIN_ALERT_HISTORY_DAYS", 180, minimum=0)
GPULSE_RETAIN_DELIVERY_ATTEMPTS_DAYS = env_int("GPULSE_RETAIN_DELIVERY_ATTEMPTS_DAYS", 30, minimum=0)
GPULSE_RETAIN_AUDIT_DAYS = env_int("GPULSE_RETAIN_AUDIT_DAYS", 400, minimum=0)
GPULSE_RETAIN_HEALTH_CHANGES_DAYS = env_int("GPULSE_RETAIN_HEALTH_CHANGES_DAYS", 90, minimum=0)
GPULSE_RETAIN_INCIDENTS_DAYS = env_int("GPULSE_RETAIN_INCIDENTS_DAYS", 730, minimum=0)

# Long-term storage (dashboard/longterm/, docs/long-term-storage.md). With a URL, ingest sends the per-GPU and
# per-node series of /metrics every GPULSE_REMOTE_WRITE_INTERVAL seconds to a Prometheus remote-write endpoint,
# keeping at most GPULSE_REMOTE_WRITE_BUFFER_SAMPLES samples while it is away (2,000,000: 2 minutes at 8,000
# GPUs' 240,000 samples a round, about 80 MB); each request may take GPULSE_REMOTE_WRITE_TIMEOUT seconds.
GPULSE_REMOTE_WRITE_URL = env_str("GPULSE_REMOTE_WRITE_URL", "")
GPULSE_REMOTE_WRITE_INTERVAL = env_float("GPULSE_REMOTE_WRITE_INTERVAL", 15.0, minimum=1.0)
GPULSE_REMOTE_WRITE_BUFFER_SAMPLES = env_int("GPULSE_REMOTE_WRITE_BUFFER_SAMPLES", 2_000_000, minimum=1)
GPULSE_REMOTE_WRITE_TIMEOUT = env_float("GPULSE_REMOTE_WRITE_TIMEOUT", 10.0, minimum=0.1, maximum=120.0)
# With a URL (the store's Prometheus API root, as Grafana's data source takes it), the node history reads the
# ranges older than the local retention from it, waiting GPULSE_HISTORY_PROMQL_TIMEOUT seconds in all.
GPULSE_HISTORY_PROMQL_URL = env_str("GPULSE_HISTORY_PROMQL_URL", "")
GPULSE_HISTORY_PROMQL_TIMEOUT = env_float("GPULSE_HISTORY_PROMQL_TIMEOUT", 10.0, minimum=0.1, maximum=120.0)
# How both authenticate to the store (secrets from the environment only): a bearer token, or a user name and
# password (basic auth); and the tenant Mimir and Cortex want (X-Scope-OrgID).
GPULSE_REMOTE_STORE_BEARER_TOKEN = env_str("GPULSE_REMOTE_STORE_BEARER_TOKEN", "")
GPULSE_REMOTE_STORE_USERNAME = env_str("GPULSE_REMOTE_STORE_USERNAME", "")
GPULSE_REMOTE_STORE_PASSWORD = env_str("GPULSE_REMOTE_STORE_PASSWORD", "")
GPULSE_REMOTE_STORE_TENANT = env_str("GPULSE_REMOTE_STORE_TENANT", "")
# Where the node history (dashboard/nodes/history.py) finds the store's reader: by dotted path, so it imports no
# feature app.
GPULSE_HISTORY_STORE_READER = "dashboard.longterm.reading.store_history"

# Benchmarks: where ranks meet (default: the job's first node, by name), the
# port range to pick from, and the launch rate per user ("count/seconds").
GPULSE_RENDEZVOUS_ADDR = env_str("GPULSE_RENDEZVOUS_ADDR", "")
GPULSE_RENDEZVOUS_PORTS = tuple(int(p) for p in env_str("GPULSE_RENDEZVOUS_PORTS", "29500-29999").split("-"))
GPULSE_BENCHMARK_RATE = env_str("GPULSE_BENCHMARK_RATE", "10/600")
# The largest message a launch may ask for, in bytes (8 GiB: two buffers fit a GPU).
GPULSE_BENCHMARK_MAX_BYTES = int(env_float("GPULSE_BENCHMARK_MAX_BYTES", DEFAULT_MAX_BYTES))

# Webhooks: loopback, private, link-local and other non-global targets are
# refused unless allowed, all of them or a list of networks (CIDR).
GPULSE_WEBHOOK_ALLOW_PRIVATE = env_bool("GPULSE_WEBHOOK_ALLOW_PRIVATE", False)
GPULSE_WEBHOOK_ALLOWED_NETWORKS = env_list("GPULSE_WEBHOOK_ALLOWED_NETWORKS", [])
# Seconds one attempt may take in all (connect, send, answer, redirects): a
# control worker, or a person pressing "Send test", waits that long at most.
GPULSE_WEBHOOK_TIMEOUT = env_float("GPULSE_WEBHOOK_TIMEOUT", 10.0, minimum=0.1, maximum=10.0)
# Attempts per event and endpoint before giving up; the wait after attempt n is
# about RETRY_BASE × 2^(n-1) seconds (±50 % jitter, at most 5 minutes).
GPULSE_WEBHOOK_MAX_ATTEMPTS = env_int("GPULSE_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
GPULSE_WEBHOOK_RETRY_BASE = env_float("GPULSE_WEBHOOK_RETRY_BASE", 2.0, minimum=0.0)
# Attempts in flight to one endpoint at once, across every webhook worker: a
# slow receiver holds at most this many worker threads.
GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY = env_int("GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY", 2, minimum=1)
# Seconds a node's notification waits after its first alert for the others of the same event (Alertmanager's
# group_wait): Xid 79 on 8 GPUs, or several checks failing together, page once. 0: sent as soon as it can be.
GPULSE_ALERT_GROUP_WAIT = env_float("GPULSE_ALERT_GROUP_WAIT", 10.0, minimum=0.0, maximum=600.0)
# Slurm drain (alert rules with "drain"): off unless enabled; the scheduler
# worker (celery -Q scheduler) runs scontrol, found at GPULSE_SCONTROL, each
# call cut off after GPULSE_SCONTROL_TIMEOUT seconds. A failed call is tried
# GPULSE_DRAIN_MAX_ATTEMPTS times, about RETRY_BASE × 2^(n-1) s apart.
GPULSE_SLURM_DRAIN = env_bool("GPULSE_SLURM_DRAIN", False)
GPULSE_SCONTROL = env_str("GPULSE_SCONTROL", "scontrol")
GPULSE_SCONTROL_TIMEOUT = env_float("GPULSE_SCONTROL_TIMEOUT", 10.0, minimum=0.1, maximum=120.0)
GPULSE_DRAIN_MAX_ATTEMPTS = env_int("GPULSE_DRAIN_MAX_ATTEMPTS", 5, minimum=1, maximum=20)
GPULSE_DRAIN_RETRY_BASE = env_float("GPULSE_DRAIN_RETRY_BASE", 5.0, minimum=0.0)
# slurmctld's time zone: scontrol stamps a drain's reason in its local time.
GPULSE_SLURM_TIME_ZONE = env_str("GPULSE_SLURM_TIME_ZONE", "UTC")
try:
    ZoneInfo(GPULSE_SLURM_TIME_ZONE)
except (ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(
        f"GPULSE_SLURM_TIME_ZONE must be an IANA time zone such as Europe/Paris, not {GPULSE_SLURM_TIME_ZONE!r}"
    ) from None
# A drain a person made for maintenance makes the incidents that begin after it planned
# (dashboard/scheduler/planned.py): a drain whose Slurm reason matches this regex, searched
# case-insensitively. Slurm, NHC and gpulse drain nodes too, under other reasons: those are failures.
GPULSE_PLANNED_DRAIN_REASON = env_str("GPULSE_PLANNED_DRAIN_REASON", r"\b(maint\w*|planned|upgrad\w*|firmware)\b")
try:
    re.compile(GPULSE_PLANNED_DRAIN_REASON)
except re.error as exc:
    raise ImproperlyConfigured(
        f"GPULSE_PLANNED_DRAIN_REASON is not a regular expression ({exc}): {GPULSE_PLANNED_DRAIN_REASON!r}"
    ) from None
# Drain rate limits (dashboard/scheduler/limits.py): gpulse drains one node at
# most once per GPULSE_DRAIN_NODE_INTERVAL seconds, and at most
# GPULSE_DRAIN_MAX_NODES_PER_HOUR nodes in any hour; a drain over either waits.
GPULSE_DRAIN_NODE_INTERVAL = env_float("GPULSE_DRAIN_NODE_INTERVAL", 600.0, minimum=0.0)
GPULSE_DRAIN_MAX_NODES_PER_HOUR = env_int("GPULSE_DRAIN_MAX_NODES_PER_HOUR", 10, minimum=1)
# The dashboard's public address, for links in notifications (Alertmanager's
# externalURL); when set, the only origin whose pages may open a websocket.
GPULSE_EXTERNAL_URL = env_str("GPULSE_EXTERNAL_URL", "")
if GPULSE_EXTERNAL_URL and not re.match(r"https?://[^/?#]+", GPULSE_EXTERNAL_URL):
    raise ImproperlyConfigured(
        f"GPULSE_EXTERNAL_URL must be an http(s) URL such as https://gpulse.example.com, not {GPULSE_EXTERNAL_URL!r}"
    )
# Open websockets one user may hold across every web process (a tab holds one or two).
GPULSE_WS_MAX_PER_USER = env_int("GPULSE_WS_MAX_PER_USER", 20, minimum=1)
# The simulator page and its fault API (dashboard/simulator/), for a simulated fleet such as `make demo`'s:
# on by default here, off under GPULSE_ENV=production unless set to true (dashboard/production.py).
GPULSE_SIMULATOR = env_bool("GPULSE_SIMULATOR", True)

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
