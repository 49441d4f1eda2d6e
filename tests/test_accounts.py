import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.core.cache import cache

from dashboard.accounts.models import AuditEvent
from tests.web_server import uvicorn_server

pytestmark = pytest.mark.django_db

FAILURE_LIMIT = 5


@pytest.fixture(autouse=True)
def clean_cache(redis_client):
    cache.clear()


@pytest.fixture(autouse=True)
def fast_hasher(settings):
    """Dozens of logins per test: a cheap hash keeps them fast (the lockout does not depend on it)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def login(client, password, username="viewer", path="/accounts/login/", address="198.51.100.7"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_a_user_logs_in_and_out(client, viewer_user, user_password):
    response = login(client, user_password)
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_repeated_failed_logins_lock_the_account_out_even_with_the_right_password(client, viewer_user, user_password):
    for _ in range(FAILURE_LIMIT - 1):
        assert login(client, "wrong").status_code == 200
    assert login(client, "wrong").status_code == 429  # the last allowed failure says so
    response = login(client, user_password)
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert client.get("/").status_code == 302  # still not logged in


def test_the_admin_login_shares_the_lockout(client, admin_user, user_password):
    for _ in range(FAILURE_LIMIT):
        login(client, "wrong", username="admin", path="/admin/login/")
    response = login(client, user_password, username="admin", path="/admin/login/")
    assert response.status_code == 429
    assert client.get("/admin/").status_code == 302  # still not logged in


def test_failures_on_one_form_lock_the_other_form_too(client, admin_user, user_password):
    for _ in range(FAILURE_LIMIT):
        login(client, "wrong", username="admin")
    assert login(client, user_password, username="admin", path="/admin/login/").status_code == 429


@pytest.mark.parametrize("spelling", [" viewer", "viewer ", "ｖｉｅｗｅｒ", "\u3000viewer", "VIEWER"])
def test_another_spelling_of_the_username_is_locked_out_too(client, viewer_user, user_password, spelling):
    for _ in range(FAILURE_LIMIT):
        login(client, "wrong")
    assert login(client, user_password, username=spelling).status_code == 429


@pytest.mark.parametrize("spelling", [" viewer", "ｖｉｅｗｅｒ"])
def test_failures_under_other_spellings_count_for_the_user(client, viewer_user, user_password, spelling):
    for _ in range(FAILURE_LIMIT):
        login(client, "wrong", username=spelling)
    assert login(client, user_password).status_code == 429


def test_failures_from_one_address_do_not_lock_the_user_out_elsewhere(client, viewer_user, user_password):
    for _ in range(FAILURE_LIMIT):
        login(client, "wrong", address="203.0.113.66")
    assert login(client, user_password, address="203.0.113.66").status_code == 429
    assert login(client, user_password, address="198.51.100.7").status_code == 302


def test_failures_for_many_usernames_do_not_lock_out_the_address(client, viewer_user, user_password):
    for n in range(30):
        login(client, "wrong", username=f"nobody{n}")
    assert login(client, user_password).status_code == 302


def test_password_reset_is_not_served_without_mail(client, viewer_user):
    for path in ("/accounts/password_reset/", "/accounts/reset/done/"):
        assert client.get(path).status_code in (302, 404)  # login required, then no such page
    client.force_login(viewer_user)
    assert client.get("/accounts/password_reset/").status_code == 404
    assert client.get("/accounts/password_change/").status_code == 200


SEED_USER = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
get_user_model().objects.create_user("alice", password="right-password-1")
"""


@pytest.fixture(scope="module")
def proxied_web(redis_server, tmp_path_factory):
    """uvicorn trusting X-Forwarded-For from 127.0.0.1, as behind the documented proxy."""
    state = tmp_path_factory.mktemp("proxied")
    with uvicorn_server(state, redis_server.url, SEED_USER, "--forwarded-allow-ips", "127.0.0.1") as url:
        yield url


def proxied_login(url: str, forwarded_for: str, password: str) -> int:
    """Log in as alice through the proxy on behalf of the client at ``forwarded_for``; the HTTP status."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
                                          NoRedirect())
    headers = {"X-Forwarded-For": forwarded_for}
    page = browser.open(urllib.request.Request(url + "/accounts/login/", headers=headers), timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": token, "username": "alice", "password": password})
    try:
        return browser.open(urllib.request.Request(url + "/accounts/login/", data=body.encode(), headers=headers),
                            timeout=30).status
    except urllib.error.HTTPError as exc:
        return exc.code


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_behind_the_proxy_one_clients_failures_do_not_lock_out_another(proxied_web, redis_client):
    for _ in range(FAILURE_LIMIT - 1):
        assert proxied_login(proxied_web, "203.0.113.66", "wrong") == 200
    assert proxied_login(proxied_web, "203.0.113.66", "wrong") == 429
    assert proxied_login(proxied_web, "203.0.113.66", "right-password-1") == 429
    assert proxied_login(proxied_web, "198.51.100.7", "right-password-1") == 302


def test_launches_and_cancels_are_audited(client, redis_client, operator_user):
    import json

    from gpulse import schema
    from gpulse.keys import Keys
    from tests.samples import sample

    now = time.time()
    redis_client.set(Keys().node("n1"), schema.encode(sample("n1", ts=now, interval=60)))
    redis_client.hset(Keys().known_nodes, "n1", json.dumps({"ts": now, "interval": 60}))
    redis_client.set(Keys().worker("n1"), "{}", ex=60)  # its node worker's heartbeat: launches need one
    client.force_login(operator_user)
    job_id = client.post("/api/v1/benchmarks", json.dumps({"nodes": ["n1"], "backend": "gloo"}),
                         content_type="application/json").json()["id"]
    client.post(f"/api/v1/benchmarks/{job_id}/cancel")
    actions = list(AuditEvent.objects.order_by("created").values_list("username", "action", "target"))
    assert actions == [("operator", "benchmark.launch", f"job {job_id}"),
                       ("operator", "benchmark.cancel", f"job {job_id}")]


def test_rule_changes_mutes_and_faults_are_audited(admin, redis_client):
    import json

    from gpulse.keys import Keys

    client = admin
    rule_id = client.post("/api/v1/rules", json.dumps({"name": "hot", "metric": "gpu.temp", "comparison": ">",
                                                       "threshold": 80, "for_seconds": 5}),
                          content_type="application/json").json()["id"]
    client.patch(f"/api/v1/rules/{rule_id}", json.dumps({"threshold": 90}), content_type="application/json")
    client.delete(f"/api/v1/rules/{rule_id}")
    client.post("/alerts/silences/", {"node_glob": "sim-01", "minutes": 30, "comment": "maintenance"})
    redis_client.hset(Keys().known_nodes, "sim-01", json.dumps({"ts": 1.0, "interval": 1.0}))
    client.post("/api/v1/simulator/faults", json.dumps({"node": "sim-01", "gpu": 2, "fault": "hot"}),
                content_type="application/json")
    actions = list(AuditEvent.objects.order_by("created").values_list("action", "target"))
    assert actions[:3] == [("rule.create", f"rule {rule_id}"), ("rule.update", f"rule {rule_id}"),
                           ("rule.delete", f"rule {rule_id}")]
    assert ("simulator.fault", "sim-01/2") in actions
    assert any(action == "silence.create" for action, _ in actions)


# -- passwords (issue 32: the admin who can launch jobs on every node had `password`) ---------------------------

@pytest.mark.parametrize("password, why", [
    ("password", "This password is too common."),
    ("12345678", "This password is entirely numeric."),
    ("admin-1", "This password is too short. It must contain at least 8 characters."),
    ("administrator", "The password is too similar to the username."),
])
def test_ensure_admin_refuses_a_weak_password_from_the_environment(monkeypatch, password, why):
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command

    monkeypatch.setenv("GPULSE_ADMIN_PASSWORD", password)
    with pytest.raises(CommandError, match=rf"GPULSE_ADMIN_PASSWORD is refused: .*{re.escape(why)}"):
        call_command("ensure_admin", "--username", "administrator" if password == "administrator" else "admin")
    assert not get_user_model().objects.exists()


def test_ensure_admin_takes_a_sound_password_or_generates_one(monkeypatch, capsys):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    monkeypatch.setenv("GPULSE_ADMIN_PASSWORD", "system-test-admin-pw")
    call_command("ensure_admin")
    assert get_user_model().objects.get(username="admin").check_password("system-test-admin-pw")
    monkeypatch.delenv("GPULSE_ADMIN_PASSWORD")
    call_command("ensure_admin", "--username", "second")
    generated = capsys.readouterr().out.rsplit("with password: ", 1)[1].strip()
    assert get_user_model().objects.get(username="second").check_password(generated)


@pytest.mark.parametrize("password", ["password", "12345678"])
def test_the_password_change_page_refuses_a_common_or_numeric_password(client, viewer_user, user_password, password):
    client.force_login(viewer_user)
    response = client.post("/accounts/password_change/", {"old_password": user_password, "new_password1": password,
                                                          "new_password2": password})
    assert response.status_code == 200  # the form again, with why
    page = response.content.decode()
    assert "This password is too common." in page or "This password is entirely numeric." in page
    viewer_user.refresh_from_db()
    assert viewer_user.check_password(user_password)


def test_the_admins_user_form_refuses_password(admin, viewer_user):
    response = admin.post(f"/admin/auth/user/{viewer_user.pk}/password/",
                          {"password1": "password", "password2": "password", "usable_password": "true"})
    assert response.status_code == 200 and "This password is too common." in response.content.decode()
    viewer_user.refresh_from_db()
    assert not viewer_user.check_password("password")
