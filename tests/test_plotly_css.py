"""Plotly.js under a strict CSP: static/gpulse/plotly.css holds the rules of the installed
bundle, and templates/plotly.html names every stylesheet the bundle would inject at load."""

import re
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
    # None with the bundle of vendor/plotly (MapLibre's comes only with map traces); the full bundle had one.
    ids = injected_style_ids(BUNDLE.read_text())
    template = (ROOT / "templates" / "plotly.html").read_text()
    assert sorted(re.findall(r'id="([0-9a-f]{64})"', template)) == sorted(ids), ids
