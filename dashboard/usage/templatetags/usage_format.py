"""How the usage page writes its figures: $1,234.56, 12.3 (hours, %, kWh), "3 h 12 min"."""

from django import template

from dashboard.elapsed import elapsed

register = template.Library()

NONE = "—"


@register.filter
def usd(value: float | None) -> str:
    return NONE if value is None else f"${value:,.2f}"


@register.filter
def one_decimal(value: float | None) -> str:
    return NONE if value is None else f"{value:,.1f}"


# A row's busy_by (gpulse.usage.busy_by) in the table's words.
BUSY_BY_WORDS = {"sm_activity": "SM activity", "utilization": "utilization"}


@register.filter
def busy_by_words(busy_by: str | None) -> str:
    return BUSY_BY_WORDS.get(busy_by or "", NONE)


@register.filter
def idle_for(seconds: float) -> str:
    """Seconds as 42 s, 12 min, 3 h 12 min or 2 d 5 h."""
    return elapsed(seconds, coarse=True)
