"""Every page at desktop and phone width, light and dark: nothing overflows, text is readable.

Each page is opened in Chromium at 1440x900 and 390x844 (an iPhone's CSS pixels), with
the operating system's colour scheme light and dark. A page passes when it is no wider
than the viewport (wide tables scroll inside themselves), the log-out button is on
screen, and every piece of text on it meets WCAG 2.2 AA contrast (4.5:1, 3:1 for large
text) against the background it is drawn on, computed here from the rendered colours.
Every page also passes axe-core's checks (tests/axe.py), at each width and in each scheme.

GPULSE_PAGE_SHOTS=<folder> also saves a full-page screenshot of each, for a person to look at.
"""

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.axe import axe_violations, describe
from tests.browser import finished_gpu_check, finished_sweep, launch_finished_job, log_in, passed_afterwards
from tests.test_browser_usage import DRAWN_OR_EMPTY as USAGE_CHART_DRAWN_OR_EMPTY

pytestmark = pytest.mark.browser

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
SCHEMES = ("light", "dark")

# Each text element (HTML, shown, with text of its own) with its colour, the first opaque
# background behind it and its size. Plotly's SVG and disabled controls are left out:
# WCAG exempts inactive controls, and the charts' colours are Plotly's.
TEXT_COLOURS = """() => {
  const out = [];
  const opaque = c => { const m = c.match(/[\\d.]+/g); return m && (m.length < 4 || Number(m[3]) === 1); };
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg, .js-plotly-plot, [hidden], option") || el.disabled) continue;
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== "visible") continue;
    let opacity = 1, bg = null;
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      opacity *= Number(s.opacity);
      if (!bg && opaque(s.backgroundColor) && s.backgroundColor !== "rgba(0, 0, 0, 0)") bg = s.backgroundColor;
    }
    bg = bg || "rgb(255, 255, 255)";
    const rect = el.getBoundingClientRect();
    if (el.matches(".skip-link") && rect.bottom <= 0) continue;  // shown only when focused
    out.push({
      what: el.tagName.toLowerCase()
            + (el.className && typeof el.className === "string" ? "." + el.className.trim().replace(/\\s+/g, ".") : "")
            + " " + JSON.stringify(el.textContent.trim().slice(0, 30)),
      color: style.color, background: bg, opacity: opacity,
      size: parseFloat(style.fontSize), weight: Number(style.fontWeight),
    });
  }
  return out;
}"""

# What sticks out past the right edge of the viewport, for a readable failure.
OVERFLOW = """() => {
  const width = window.innerWidth;
  const wide = Array.from(document.body.querySelectorAll("*")).filter(e => {
    const r = e.getBoundingClientRect();
    if (r.left + Math.max(r.width, e.scrollWidth) <= width + 0.5) return false;  // its box or its text
    for (let p = e.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll" || o === "hidden") return false;  // clipped by its container
    }
    return true;
  }).slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
                          + "." + String(e.className).replace(/\\s+/g, ".")
                          + " right=" + Math.round(e.getBoundingClientRect().right));
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, wide: wide};
}"""

LOGOUT_BUTTON = """() => {
  const b = document.querySelector(".topbar .logout button");
  if (!b) return null;
  const r = b.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: window.innerWidth};
}"""

# Pages that draw from live data: wait until they have.
READY = {
    "overview": "() => window.gpulse && window.gpulse.frames > 0"
                " && document.querySelectorAll('#node-table tbody tr').length === 4",
    "node": "() => document.querySelectorAll('#gpu-table tbody tr').length > 0"
            " && document.querySelectorAll('#health-checks tbody tr').length > 0",
    "health": "() => /\\d+ healthy/.test(document.getElementById('health-counts').textContent)",
    "usage": USAGE_CHART_DRAWN_OR_EMPTY,
}


def channel(value: float) -> float:
    value /= 255
    return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4


def relative_luminance(rgb: str) -> float:
    """WCAG 2.2's relative luminance of a CSS ``rgb(r, g, b)`` colour."""
    red, green, blue = (float(v) for v in re.findall(r"[\d.]+", rgb)[:3])
    return 0.2126 * channel(red) + 0.7152 * channel(green) + 0.0722 * channel(blue)


def contrast(foreground: str, background: str) -> float:
    lighter, darker = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def is_large(text: dict) -> bool:
    """WCAG's large text: 18 pt (24 px), or 14 pt (18.67 px) bold."""
    return text["size"] >= 24 or (text["size"] >= 18.66 and text["weight"] >= 700)


def test_the_contrast_formula_matches_wcag():
    assert contrast("rgb(0, 0, 0)", "rgb(255, 255, 255)") == pytest.approx(21)
    assert contrast("rgb(255, 255, 255)", "rgb(255, 255, 255)") == pytest.approx(1)
    # The warning colour issue 18 measured: #d88a1d on #f3f5f8.
    assert contrast("rgb(216, 138, 29)", "rgb(243, 245, 248)") == pytest.approx(2.54, abs=0.01)


@pytest.fixture(scope="module")
def page_paths(admin_context, running_system) -> Iterator[dict[str, str]]:
    """Every page a user meets, with the objects some of them show: a job, a webhook, a sweep that fails
    sim-03's health, so /alerts/ lists its firing alert with the webhook's failed delivery."""
    base = running_system.base_url
    page = admin_context.new_page()
    page.set_default_timeout(15_000)
    with passed_afterwards(running_system):
        try:
            # Finished, so the pages show what a finished job adds (the overview's throughput line).
            job = launch_finished_job(page, base)

            page.goto(f"{base}/alerts/webhooks/")
            page.fill("#id_name", "pages-test receiver with a long name")
            page.fill("#id_url", "https://receiver.example.com/hooks/gpulse/a-rather-long-path-that-does-not-wrap")
            with page.expect_navigation():
                page.click("#webhook-form button[type=submit]")
            webhook = re.search(r"/alerts/webhooks/\d+/$", page.url).group(0)  # a new webhook opens on its page
            sweep = finished_sweep(running_system.stack, "sim-03", 1.5)
            gpu_check = finished_gpu_check(running_system.stack)
            # The receiver's name does not resolve: its delivery is retried, and the page says so.
            deadline = time.monotonic() + 60
            while not page.goto(f"{base}/alerts/").text().count('class="outcome-retry">pages-test receiver'):
                assert time.monotonic() < deadline, "no failed delivery to the pages-test receiver listed"
                time.sleep(1)
        finally:
            page.close()
        yield {
            "login": "/accounts/login/",
            "overview": "/",
            "health": "/health/",
            "usage": "/usage/",
            "node": "/nodes/sim-01/",
            "benchmarks": "/benchmarks/",
            "job": job,
            "compare": "/benchmarks/compare/",
            "sweeps": "/benchmarks/fabric/",
            "sweep": f"/benchmarks/fabric/{sweep}/",
            "gpu_checks": "/benchmarks/gpu-checks/",
            "gpu_check": f"/benchmarks/gpu-checks/{gpu_check}/",
            "reliability": "/reliability/",
            "alerts": "/alerts/",
            "rules": "/alerts/rules/",
            "webhooks": "/alerts/webhooks/",
            "webhook": webhook,
            "simulator": "/alerts/simulator/",
            "password": "/accounts/password_change/",
            "404": "/no-such-page/",
        }


def every_page(chromium, system, paths: dict[str, str], width: str, scheme: str):
    """Open each page of ``paths`` at ``width`` in ``scheme``, the login page logged out and
    the others logged in; yield its name and the page once it has drawn from live data."""
    for logged_in in (False, True):
        context = chromium.new_context(viewport=VIEWPORTS[width], color_scheme=scheme)
        page = context.new_page()
        page.set_default_timeout(15_000)
        if logged_in:
            log_in(page, system.base_url, system.username, system.password, "/healthz")
        try:
            for name, path in paths.items():
                if (name == "login") == logged_in:
                    continue
                page.goto(system.base_url + path)
                page.wait_for_function(READY.get(name, "() => document.readyState === 'complete'"))
                assert page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches") == (scheme == "dark")
                yield name, page
        finally:
            context.close()


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", VIEWPORTS)
def test_every_page_fits_the_screen_and_its_text_is_readable(chromium, running_system, page_paths, width, scheme):
    shots = os.environ.get("GPULSE_PAGE_SHOTS")
    problems = []
    for name, page in every_page(chromium, running_system, page_paths, width, scheme):
        where = f"{name} ({page_paths[name]}) at {width}, {scheme}"
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=f"{shots}/{name}-{width}-{scheme}.png", full_page=True)

        overflow = page.evaluate(OVERFLOW)
        if overflow["scrollWidth"] > overflow["innerWidth"]:
            problems.append(f"{where}: page is {overflow['scrollWidth']} px wide in {overflow['innerWidth']}:"
                            f" {overflow['wide']}")
        button = page.evaluate(LOGOUT_BUTTON)
        if name != "login" and not (
            button and 0 <= button["left"] and button["right"] <= button["width"] and button["top"] >= 0
        ):
            problems.append(f"{where}: the log-out button is off screen: {button}")

        for text in page.evaluate(TEXT_COLOURS):
            needed = 3.0 if is_large(text) else 4.5
            ratio = contrast(text["color"], text["background"])
            if text["opacity"] < 1 or ratio < needed:
                problems.append(f"{where}: {text['what']} {text['color']} on {text['background']}"
                                f" opacity {text['opacity']:.2f}: {ratio:.2f}:1 < {needed}:1")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", VIEWPORTS)
def test_every_page_passes_axe(chromium, running_system, page_paths, width, scheme):
    """axe-core (tests/axe.py: WCAG 2.2 A and AA, best practices) on every page, as drawn at each width
    and in each colour scheme: names for fields, buttons, links and charts, contrast, structure."""
    problems = []
    for name, page in every_page(chromium, running_system, page_paths, width, scheme):
        problems += describe(axe_violations(page), f"{name} ({page_paths[name]}) at {width}, {scheme}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_status_and_severity_colours_are_readable(chromium, running_system, scheme):
    """The colours that carry meaning, on the backgrounds they appear on, whether or not the
    running system happens to show each one now: the page's own stylesheet renders them."""
    context = chromium.new_context(viewport=VIEWPORTS["desktop"], color_scheme=scheme)
    page = context.new_page()
    try:
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/alerts/")
        samples = page.evaluate("""() => {
          const main = document.querySelector("main");
          const html = `
            <span class="status status-up">up</span><span class="status status-stale">stale</span>
            <span class="status status-down">down</span><span class="status status-unknown">queued</span>
            <span class="status status-running">running</span><span class="status status-succeeded">succeeded</span>
            <span class="status status-failed">failed</span><span class="status status-timed_out">timed_out</span>
            <span class="status status-cancelled">cancelled</span>
            <span class="verdict verdict-healthy">healthy</span><span class="verdict verdict-degraded">degraded</span>
            <span class="verdict verdict-failing">failing</span><span class="verdict verdict-unknown">unknown</span>
            <p class="muted">muted</p><span class="na">not supported</span><a href="#">link</a>
            <table class="table"><tbody>
              <tr class="status-firing"><td class="severity-critical">critical</td>
                <td class="severity-warning">warning</td><td class="severity-info">info</td></tr>
              <tr class="row-down"><td>down row</td></tr>
              <tr class="row-stale"><td><span class="status-stale">stale row</span></td></tr>
              <tr class="lost"><td><span class="status-down">lost row</span></td></tr>
              <tr class="outcome-failed"><td>failed delivery</td></tr><tr class="outcome-retry"><td>retry</td></tr>
              <tr class="disabled"><td>disabled rule</td></tr>
            </tbody></table>
            <ul class="messages">
              <li class="error">error</li><li class="warning">warning</li><li class="success">ok</li><li>info</li>
            </ul>
            <p class="empty">Nothing is firing.</p>
            <span class="helptext">help</span><span class="frame-age late">late</span>`;
          const holder = document.createElement("div");
          holder.className = "panel";
          holder.innerHTML = html;
          main.prepend(holder);
          const pick = holder.querySelectorAll(
            ".status, .verdict, .muted, .na, a, td, td span, .messages li, .empty, .helptext, .frame-age");
          const opaque = c => c !== "rgba(0, 0, 0, 0)" && c !== "transparent";
          return Array.from(pick).map(el => {
            let bg = null, opacity = 1;
            for (let e = el; e; e = e.parentElement) {
              const s = getComputedStyle(e);
              opacity *= Number(s.opacity);
              if (!bg && opaque(s.backgroundColor)) bg = s.backgroundColor;
            }
            return {what: el.outerHTML.slice(0, 60), color: getComputedStyle(el).color,
                    background: bg, opacity: opacity};
          });
        }""")
        topbar = page.evaluate("""() => Array.from(
            document.querySelectorAll(".topbar nav a, .topbar .logout a, .topbar .logout button"))
          .map(el => ({what: el.textContent.trim(), color: getComputedStyle(el).color,
                       background: getComputedStyle(document.querySelector(".topbar")).backgroundColor,
                       opacity: 1}))""")
    finally:
        context.close()
    assert len(samples) >= 25 and len(topbar) >= 4
    low = [f"{s['what']}: {s['color']} on {s['background']} opacity {s['opacity']:.2f}"
           f" = {contrast(s['color'], s['background']):.2f}"
           for s in samples + topbar if s["opacity"] < 1 or contrast(s["color"], s["background"]) < 4.5]
    assert not low, "\n".join(low)


def test_the_skip_link_is_the_first_stop_and_moves_focus_to_the_content(admin_page, running_system):
    admin_page.goto(running_system.base_url + "/alerts/")
    admin_page.keyboard.press("Tab")
    focused = admin_page.evaluate(
        "() => ({text: document.activeElement.textContent, top: document.activeElement.getBoundingClientRect().top})"
    )
    assert focused == {"text": "Skip to content", "top": 0}
    admin_page.keyboard.press("Enter")
    assert admin_page.evaluate("() => document.activeElement.id") == "main"


def test_a_missing_page_is_a_404_in_the_site_layout(admin_page, running_system):
    response = admin_page.goto(running_system.base_url + "/no/such/page/")
    assert response.status == 404
    assert admin_page.locator(".topbar nav").is_visible()
    assert admin_page.locator("main h1").text_content() == "No such page"
    assert "/no/such/page/" in admin_page.locator("main").text_content()


def test_the_password_change_page_is_linked_and_works(chromium, running_system):
    """From the user's name in the top bar to a changed password, and back again. Last in this
    module: changing the password logs out the admin's other sessions (admin_context's)."""
    context = chromium.new_context(viewport=VIEWPORTS["phone"])
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page, running_system.base_url, running_system.username, running_system.password, "/alerts/")
        page.click(".topbar .logout a")
        assert page.url.endswith("/accounts/password_change/")
        assert page.locator("h1").text_content() == "Change your password"
        for new, old in (
            ("a-new-Passphrase-42", running_system.password),
            (running_system.password, "a-new-Passphrase-42"),
        ):
            page.fill("#id_old_password", old)
            page.fill("#id_new_password1", new)
            page.fill("#id_new_password2", new)
            with page.expect_navigation():
                page.click("#password-change-form button[type=submit]")
            assert page.url.endswith("/accounts/password_change/done/"), page.locator("main").text_content()
            page.goto(running_system.base_url + "/accounts/password_change/")
    finally:
        context.close()
