"""Headless Chromium for the browser tests: Debian's chromium driven by Playwright.

`playwright install` downloads its own browsers from the internet, which many
clusters (and CI hosts) cannot reach, so the tests drive /usr/bin/chromium
(`make browser` installs it). A pytest plugin: list it in ``pytest_plugins``.

Pages send a Content-Security-Policy without 'unsafe-eval', which the tests
keep enforced: give ``wait_for_function`` a function ("() => ..."), since an
expression string is eval'd inside the page and the policy refuses that.
"""

from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from devtools.loadtest.browser import CHROMIUM as BROWSER_BINARY
from devtools.loadtest.browser import CHROMIUM_ARGS, VIEWPORT

CHROMIUM = Path(BROWSER_BINARY)


@pytest.fixture(scope="module")
def chromium() -> Browser:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make browser)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium) -> Page:
    """A fresh page in its own context: no cookies, no local storage from other tests."""
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def log_in(page: Page, base_url: str, username: str, password: str, next_path: str = "/") -> None:
    """Log in through the login form and land on ``next_path``."""
    page.goto(f"{base_url}/accounts/login/?next={next_path}")
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', password)
    with page.expect_navigation():
        page.click('button[type="submit"]')
    if "/accounts/login/" in page.url:
        raise AssertionError(f"logging in as {username!r} failed: still on {page.url}")


@pytest.fixture(scope="module")
def admin_context(chromium, running_system) -> BrowserContext:
    """One context logged in to the running system as its admin, for a whole module:
    its HTTP cache keeps the 1.1 MB Plotly.js bundle from loading once per test."""
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    log_in(page, running_system.base_url, running_system.username, running_system.password, "/healthz")
    page.close()
    yield context
    context.close()


@pytest.fixture
def admin_page(admin_context) -> Page:
    page = admin_context.new_page()
    page.set_default_timeout(15_000)
    yield page
    page.evaluate("localStorage.clear()")  # choices a test made (heatmap metric) must not leak into the next
    page.close()
