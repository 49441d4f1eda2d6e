"""The real VictoriaMetrics the long-term storage tests write to and read from (devtools/victoria_metrics.py),
one per test module."""

from pathlib import Path

import pytest

from devtools.victoria_metrics import VICTORIA_METRICS, VictoriaMetrics

needs_victoria_metrics = pytest.mark.skipif(not Path(VICTORIA_METRICS).exists(),
                                            reason="victoria-metrics is not installed (make victoria-metrics)")


@pytest.fixture(scope="module")
def victoria_metrics(tmp_path_factory):
    server = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
