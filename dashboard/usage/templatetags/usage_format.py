"""How the usage page writes its figures: $1,234.56, 12.3 (hours, %, kWh), "3 h 12 min"."""

from django import template

register = template.Library()

NONE = "—"


@register.filter
def usd(value: float | None) -> str:
    return NONE if value is None else f"${value:,.2f}"


@register.filter
def one_decimal(value: float | None) -> str:
    return NONE if value is None else f"{value:,.1f}"


@register.filter
def idle_for(seconds: float) -> str:
    """Seconds as 42 s, 12 min, 3 h 12 min or 2 d 5 h."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
