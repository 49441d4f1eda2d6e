"""In a browser, on the running system: a password a validator refuses is refused, saying why (issue 32)."""

import pytest

from tests.browser import VIEWPORT, log_in

pytestmark = pytest.mark.browser


def test_the_password_change_page_refuses_password(chromium, running_system):
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page, running_system.base_url, running_system.username, running_system.password,
               "/accounts/password_change/")
        page.fill("#id_old_password", running_system.password)
        page.fill("#id_new_password1", "password")
        page.fill("#id_new_password2", "password")
        with page.expect_navigation():
            page.click("#password-change-form button[type=submit]")
        assert page.url.endswith("/accounts/password_change/")
        assert "This password is too common." in page.locator("#password-change-form").inner_text()
    finally:
        context.close()
    # Unchanged: the admin still logs in with the old one.
    context = chromium.new_context()
    try:
        log_in(context.new_page(), running_system.base_url, running_system.username, running_system.password)
    finally:
        context.close()
