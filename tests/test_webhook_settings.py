"""Webhook settings come from the environment, and a bad value stops the start with one clear line."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRINT = (
    "from django.conf import settings as s;"
    " print(s.GPULSE_WEBHOOK_TIMEOUT, s.GPULSE_WEBHOOK_MAX_ATTEMPTS, s.GPULSE_WEBHOOK_RETRY_BASE)"
)


def settings_with(**variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULSE_")}
    env.update(variables, DJANGO_SETTINGS_MODULE="dashboard.settings")
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {PRINT}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_defaults_and_values_from_the_environment():
    assert settings_with().stdout.split() == ["10.0", "8", "2.0"]
    done = settings_with(GPULSE_WEBHOOK_TIMEOUT="2.5", GPULSE_WEBHOOK_MAX_ATTEMPTS="3", GPULSE_WEBHOOK_RETRY_BASE="0.5")
    assert done.stdout.split() == ["2.5", "3", "0.5"]


def test_a_value_out_of_range_or_not_a_number_is_refused_by_name():
    cases = {
        "GPULSE_WEBHOOK_TIMEOUT": ("60", "GPULSE_WEBHOOK_TIMEOUT must be at least 0.1 and at most 10, not '60'"),
        "GPULSE_WEBHOOK_MAX_ATTEMPTS": ("0", "GPULSE_WEBHOOK_MAX_ATTEMPTS must be at least 1, not '0'"),
        "GPULSE_WEBHOOK_RETRY_BASE": ("soon", "GPULSE_WEBHOOK_RETRY_BASE must be a number, not 'soon'"),
    }
    for name, (value, message) in cases.items():
        done = settings_with(**{name: value})
        assert done.returncode != 0 and message in done.stderr, done.stderr
