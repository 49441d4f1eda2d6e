"""{% local_time %}: a server time as every page writes it, for local-time.js to show in the browser's zone."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.template import Context, Template, TemplateSyntaxError


def render(text: str, **context) -> str:
    return Template("{% load local_time %}" + text).render(Context(context))


def test_a_time_is_written_in_utc_labelled_with_its_instant_for_the_browser():
    india = datetime(2026, 11, 28, 2, 20, 39, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert render("{% local_time when %}", when=india) == (
        '<time class="local-time" datetime="2026-11-27T20:50:39Z" data-precision="second">'
        "2026-11-27 20:50:39 UTC</time>")
    assert render('{% local_time when "minute" %}', when=india).endswith(
        'data-precision="minute">2026-11-27 20:50 UTC</time>')


def test_no_time_writes_nothing_and_an_unknown_precision_is_refused():
    assert render("{% local_time when %}", when=None) == ""
    with pytest.raises(TemplateSyntaxError, match="precision is one of"):
        render('{% local_time when "hour" %}', when=datetime(2026, 11, 27, tzinfo=UTC))
