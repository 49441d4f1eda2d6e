"""GPULSE_ENV=production: Django's deployment checks pass, and a missing secret stops the start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import production

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = {
    "GPULSE_ENV": "production",
    "SECRET_KEY": "k3Zq8vR1xT0pL5mN7bW2yC4dF6gH9jQ-sU_aE1iO3uY5tR7wZ9xV2cB4nM6",  # 60 random characters
    "ALLOWED_HOSTS": "gpulse.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://gpulse.example.com",
    "DATABASE_URL": "postgres://gpulse:pw@127.0.0.1:5432/gpulse",
    "REDIS_URL": "redis://:pw@127.0.0.1:6379/0",
    "GPULSE_PROXY_SSL_HEADER": "X-Forwarded-Proto=https",
}


def manage(*args: str, **env_overrides: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPULSE_")}
    env.update(PRODUCTION, DJANGO_SETTINGS_MODULE="dashboard.settings")
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_passes_under_production_settings():
    done = manage("check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


def test_production_settings_are_hardened():
    done = manage("shell", "-c", (
        "from django.conf import settings as s; print(s.DEBUG, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE,"
        " s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, s.SECURE_PROXY_SSL_HEADER, s.ALLOWED_HOSTS, s.X_FRAME_OPTIONS)"
    ), GPULSE_HSTS_SECONDS="600")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "False True True 600 True ('HTTP_X_FORWARDED_PROTO', 'https') ['gpulse.example.com'] DENY"
    )


def test_a_missing_secret_key_stops_the_start_with_a_clear_message():
    done = manage("check", SECRET_KEY=None)
    assert done.returncode != 0
    assert "SECRET_KEY must be set in the environment when GPULSE_ENV=production" in done.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SECRET_KEY": "gpulse-insecure-development-key-set-SECRET_KEY-in-production"}, "the development key"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is too weak"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS must be set"),
        ({"ALLOWED_HOSTS": "gpulse.example.com,*"}, "ALLOWED_HOSTS must name the dashboard's hosts, not '\\*'"),
        ({"DATABASE_URL": None}, "DATABASE_URL must be set"),
        ({"GPULSE_DEBUG": "true"}, "GPULSE_DEBUG=true is not allowed"),
        ({"GPULSE_ENV": "prod"}, "GPULSE_ENV must be one of development, production, not 'prod'"),
    ],
)
def test_unsafe_production_configuration_is_refused(overrides, message, monkeypatch):
    # In-process: the code settings.py runs, without a subprocess per case.
    monkeypatch.delenv("GPULSE_DEBUG", raising=False)
    for key, value in {**PRODUCTION, **overrides}.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        production.select({})


def test_the_proxy_ssl_header_accepts_header_or_meta_names():
    assert production.proxy_ssl_header("X-Forwarded-Proto=https") == ("HTTP_X_FORWARDED_PROTO", "https")
    assert production.proxy_ssl_header("HTTP_X_FORWARDED_PROTO=https") == ("HTTP_X_FORWARDED_PROTO", "https")
    with pytest.raises(ImproperlyConfigured, match="must look like X-Forwarded-Proto=https"):
        production.proxy_ssl_header("X-Forwarded-Proto")


def test_development_stays_the_default(monkeypatch):
    settings = {"DEBUG": True}
    monkeypatch.delenv("GPULSE_ENV", raising=False)
    production.select(settings)
    assert settings == {"DEBUG": True, "GPULSE_ENV": "development"}


def test_an_external_url_without_a_scheme_stops_the_start():
    # It is the one origin allowed to open websockets: a typo would refuse every browser.
    done = manage("check", GPULSE_ENV="development", GPULSE_EXTERNAL_URL="gpulse.example.com")
    assert done.returncode != 0
    assert "GPULSE_EXTERNAL_URL must be an http(s) URL" in done.stderr
