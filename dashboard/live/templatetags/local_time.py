"""{% local_time when %}: a time as every page shows it, in the browser's zone (README: one clock).

The server knows UTC only; the browser knows its zone. So a page carries the time as
<time class="local-time" datetime="…Z">, written in UTC with its label ("2026-11-27 20:50:39 UTC")
for a page read without scripts, and static/gpulse/local-time.js (loaded by base.html on every page)
rewrites it in the browser's zone with its offset, UTC on hover, as the live pages write theirs.
"""

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html

register = template.Library()

# What the browser shows: to the second, or to the minute ("oldest since 21:50").
PRECISIONS = {"second": "%Y-%m-%d %H:%M:%S", "minute": "%Y-%m-%d %H:%M"}


@register.simple_tag
def local_time(when: datetime | None, precision: str = "second") -> str:
    """The <time> element of ``when`` (an aware datetime); nothing for None."""
    if when is None:
        return ""
    if precision not in PRECISIONS:
        raise template.TemplateSyntaxError(f"local_time: precision is one of {sorted(PRECISIONS)}, not {precision!r}")
    utc = when.astimezone(UTC)
    return format_html(
        '<time class="local-time" datetime="{}" data-precision="{}">{} UTC</time>',
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"), precision, utc.strftime(PRECISIONS[precision]),
    )
