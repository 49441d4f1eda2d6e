from datetime import timedelta

from django import template

from dashboard.alerts import words
from dashboard.elapsed import elapsed

register = template.Library()
# Every alerts page says rules and configured durations the same way: {{ rule|condition }}, {{ seconds|span }}.
register.filter("condition", words.condition)
register.filter("span", words.span)


@register.filter
def duration(value: timedelta | None) -> str:
    """Render a timedelta as 45 s, 3 min 12 s, 2 h 05 min or 3 d 4 h."""
    return "" if value is None else elapsed(value.total_seconds())
