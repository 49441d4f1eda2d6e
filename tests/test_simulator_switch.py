"""The simulator (its page and fault API) is on in development, `make demo` and the tests, and off under
GPULSE_ENV=production unless GPULSE_SIMULATOR=true: off, its URLs do not resolve (404) and the nav has no
link to it (issue 33)."""

import importlib
import json
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import clear_url_caches

from dashboard import production, urls
from tests.test_production_settings import PRODUCTION, manage

pytestmark = pytest.mark.django_db

PAGE = "/alerts/simulator/"
API = "/api/v1/simulator/faults"
NAV_LINK = f'<a href="{PAGE}">Simulator</a>'


def production_settings(monkeypatch, **env: str) -> dict:
    """What GPULSE_ENV=production sets (dashboard/production.py) in the suite's production environment plus ``env``."""
    monkeypatch.delenv("GPULSE_DEBUG", raising=False)
    monkeypatch.delenv("GPULSE_SIMULATOR", raising=False)
    for key, value in {**PRODUCTION, **env}.items():
        monkeypatch.setenv(key, value)
    hardened = {}
    production.select(hardened)
    return hardened


def _decide_urls() -> None:
    """dashboard/urls.py includes the simulator's URLs or not as it is imported: import it again."""
    importlib.reload(urls)
    clear_url_caches()


@contextmanager
def serving(hardened: dict):
    """Serve requests with these settings, and the URLs they decide; the suite's own afterwards."""
    try:
        with override_settings(**hardened):
            _decide_urls()
            yield
    finally:
        _decide_urls()


def staff_client(user) -> Client:
    """Logged in under the settings in force (a new SECRET_KEY ends earlier sessions), at a host they allow."""
    client = Client(headers={"host": settings.ALLOWED_HOSTS[0]})
    client.force_login(user)
    return client


def simulator_responses(client: Client) -> tuple[HttpResponse, int, str]:
    """(the page, the API's status, a page that is always there with its nav), over HTTPS."""
    page = client.get(PAGE, secure=True)
    # An empty body: 400 where the API is there, without touching Redis.
    api = client.post(API, json.dumps({}), content_type="application/json", secure=True)
    alerts = client.get("/alerts/", secure=True)
    assert alerts.status_code == 200
    return page, api.status_code, alerts.content.decode()


def test_production_leaves_the_simulator_out(monkeypatch, admin_user, redis_client):
    hardened = production_settings(monkeypatch)
    assert hardened["GPULSE_SIMULATOR"] is False
    with serving(hardened):
        page, api, nav = simulator_responses(staff_client(admin_user))
    assert (page.status_code, api) == (404, 404)
    assert NAV_LINK not in nav
    # The 404 page has the nav too: it renders, without the link.
    assert "No such page" in page.content.decode() and NAV_LINK not in page.content.decode()


def test_production_with_the_setting_on_serves_the_simulator(monkeypatch, admin_user, redis_client):
    hardened = production_settings(monkeypatch, GPULSE_SIMULATOR="true")
    assert hardened["GPULSE_SIMULATOR"] is True
    with serving(hardened):
        page, api, nav = simulator_responses(staff_client(admin_user))
    assert (page.status_code, api) == (200, 400)
    assert NAV_LINK in nav


def test_development_serves_the_simulator(admin_user, redis_client):
    assert (settings.GPULSE_ENV, settings.GPULSE_SIMULATOR) == ("development", True)
    page, api, nav = simulator_responses(staff_client(admin_user))
    assert (page.status_code, api) == (200, 400)
    assert NAV_LINK in nav


def test_development_turns_the_simulator_on_by_default():
    # settings.py as `make demo` loads it: no GPULSE_ variable set.
    done = manage("shell", "-c", "from django.conf import settings; print(settings.GPULSE_SIMULATOR)",
                  GPULSE_ENV=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_a_malformed_setting_stops_the_start_with_a_clear_message(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="GPULSE_SIMULATOR must be true or false, not 'on please'"):
        production_settings(monkeypatch, GPULSE_SIMULATOR="on please")
