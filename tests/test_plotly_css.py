"""Plotly.js under a strict CSP: static/gpulse/plotly.css holds the rules of the installed
bundle, and templates/plotly.html names every stylesheet the bundle would inject at load."""

from pathlib import Path

from devtools.plotly_css import BUNDLE, injected_style_ids, plotly_css

ROOT = Path(__file__).resolve().parent.parent


def test_the_stylesheet_matches_the_installed_plotly():
    expected = plotly_css(BUNDLE.read_text())
    assert ".js-plotly-plot .plotly .modebar {" in expected
    assert (ROOT / "static" / "gpulse" / "plotly.css").read_text() == expected, (
        "regenerate it: .venv/bin/python -m devtools.plotly_css > static/gpulse/plotly.css"
    )


def test_the_template_stands_in_for_every_stylesheet_plotly_injects():
    ids = injected_style_ids(BUNDLE.read_text())
    assert ids, "the bundle no longer injects MapLibre's stylesheet: drop its id from templates/plotly.html"
    template = (ROOT / "templates" / "plotly.html").read_text()
    assert all(f'id="{style_id}"' in template for style_id in ids), ids
