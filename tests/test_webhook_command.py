"""`manage.py webhook_test URL`: the same signed send as a delivery, with an exit status."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from django.core.management import CommandError, call_command

from dashboard.alerts.delivery import signature

ROOT = Path(__file__).resolve().parent.parent


def test_a_refused_url_exits_non_zero_with_the_reason():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULSE_WEBHOOK_")}
    done = subprocess.run(
        [sys.executable, "manage.py", "webhook_test", "http://169.254.169.254/latest/meta-data/"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "refused: 169.254.169.254 is a link-local address (set GPULSE_WEBHOOK_ALLOW_PRIVATE=true" in done.stderr
    assert "Traceback" not in done.stderr


def test_it_sends_a_signed_test_event(receiver, settings, capsys):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    call_command("webhook_test", receiver.url + "/hook", "--secret", "abc", "--format", "alertmanager")
    [request] = receiver.wait_for(1)
    headers, body = request["headers"], request["body"]
    assert headers["X-Gpulse-Signature"] == signature("abc", headers["X-Gpulse-Timestamp"], body)
    payload = orjson.loads(body)
    assert payload["version"] == "4" and payload["alerts"][0]["labels"]["alertname"] == "gpulse test event"
    assert "delivered: HTTP 200" in capsys.readouterr().out


@pytest.mark.parametrize("status", [500, 404])
def test_an_error_answer_fails_the_command(receiver, settings, status):
    settings.GPULSE_WEBHOOK_ALLOW_PRIVATE = True
    receiver.answer(status)
    with pytest.raises(CommandError, match=f"HTTP {status}"):
        call_command("webhook_test", receiver.url)


def test_an_unknown_format_is_refused_by_the_parser():
    with pytest.raises(CommandError, match="invalid choice: 'xml'"):
        call_command("webhook_test", "https://example.com/", "--format", "xml")
