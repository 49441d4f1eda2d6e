"""A silence's end, in the message that confirms it and in the question before it is expired, is written as
every time on the pages is (the local_time tag: UTC, labelled, for local-time.js to show in the browser's
zone), and what a person typed in it stays text (issue 32)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.models import Rule, Silence
from dashboard.live.templatetags.local_time import local_time

pytestmark = pytest.mark.django_db

MARKUP = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def main_of(response) -> str:
    return response.content.decode().split("<main")[1].split("</main>")[0]


def test_the_message_of_a_new_silence_says_its_end_as_every_time_is_written(admin):
    rule = Rule.objects.create(name=MARKUP, metric="gpu.temp", comparison=">", threshold=85)
    response = admin.post("/alerts/silences/", {"rule": rule.pk, "node_glob": "gpu-0*", "minutes": "90"}, follow=True)
    silence = Silence.objects.get()
    message = re.search(r'<ul class="messages"><li class="success">(.*?)</li>', main_of(response), re.S).group(1)
    assert message == f"Silenced rule {ESCAPED}, node gpu-0* until {local_time(silence.until, 'minute')}."
    assert "UTC</time>." in message and MARKUP not in response.content.decode()


def test_the_question_before_expiring_a_silence_says_its_end_as_every_time_is_written(admin):
    rule = Rule.objects.create(name=MARKUP, metric="gpu.temp", comparison=">", threshold=85)
    silence = Silence.objects.create(rule=rule, until=timezone.now() + timedelta(hours=1))
    question = main_of(admin.get(f"/alerts/silences/{silence.id}/expire"))
    assert f"<h1>Expire the silence of rule {ESCAPED}?</h1>" in question and MARKUP not in question
    ends = local_time(silence.until, "minute")
    assert f"<li>the silence, set to last until {ends}: what it mutes notifies again</li>" in question
