"""Time the overview page's frame handling in headless Chromium while the load runs.

static/gpulse/overview.js records, per frame, the milliseconds spent in its
websocket handler (JSON.parse and applying the frame: "handle") and in the
animation-frame render that follows (heatmap and KPIs: "render"; the table is
drawn in the frame after) under ``window.gpulse``; this reads them after a
while of live frames.
"""

import asyncio
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # playwright is imported where the browser starts
    from playwright.async_api import ViewportSize

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
VIEWPORT: "ViewportSize" = {"width": 1440, "height": 900}

RESET_TIMINGS = """() => {
  const g = window.gpulse;
  g.handleMs.length = 0; g.renderMs.length = 0; g.maxHandleMs = 0; g.maxRenderMs = 0;
  return g.frames;
}"""
READ_TIMINGS = """() => {
  const g = window.gpulse;
  return {frames: g.frames, handle: g.handleMs.slice(), render: g.renderMs.slice()};
}"""


def summarise(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    array = np.asarray(values)
    return {
        "p50": round(float(np.percentile(array, 50)), 1),
        "p95": round(float(np.percentile(array, 95)), 1),
        "max": round(float(array.max()), 1),
    }


async def measure_overview(base_url: str, session: str, seconds: float) -> dict:
    """Open the overview logged in, skip its first frames (snapshot, layout), time the next ``seconds`` of deltas."""
    # Imported here: Playwright is needed only with --browser.
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            await context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
            page = await context.new_page()
            await page.goto(f"{base_url}/")
            # A function, not an expression: Playwright evaluates an expression with eval, which the CSP refuses.
            await page.wait_for_function("() => window.gpulse && window.gpulse.frames >= 3", timeout=60_000)
            first = await page.evaluate(RESET_TIMINGS)
            await asyncio.sleep(seconds)
            timings = await page.evaluate(READ_TIMINGS)
        finally:
            await browser.close()
    return {
        "frames": timings["frames"] - first,
        "handle_ms": summarise(timings["handle"]),
        "render_ms": summarise(timings["render"]),
    }
