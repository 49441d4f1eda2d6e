from datetime import timedelta

from django import template

from dashboard.alerts import words

register = template.Library()
# Every alerts page says rules and configured durations the same way: {{ rule|condition }}, {{ seconds|span }}.
register.filter("condition", words.condition)
register.filter("span", words.span)


@register.filter
def duration(value: timedelta | None) -> str:
    """Render a timedelta as 45 s, 3 min 12 s, 2 h 05 min or 3 d 4 h."""
    if value is None:
        return ""
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
