"""The retention pass under a real `celery beat` (dashboard/control_worker.py's schedule) and a real
control worker process, both on the test database as production runs them: beat sends a pass every
GPULSE_RETENTION_INTERVAL seconds, the worker downsamples and prunes, and passes nobody ran in time
expire instead of piling up."""

import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.live.models import GpuRollup, GpuRollupHour
from dashboard.retention.downsample import floor_hour
from dashboard.retention.tasks import RETENTION_TASK
from devtools.celery_process import ROOT, stop_workers
from tests.celery_workers import database_url_of_tests
from tests.test_retention import HOUR, MINUTE, minute

pytestmark = pytest.mark.django_db(transaction=True)

SENT = f"Sending due task retention ({RETENTION_TASK})".encode()


@contextmanager
def beat_running(log: Path, schedule: Path) -> Iterator[subprocess.Popen]:
    """`celery -A dashboard.control_worker beat` with a pass every second, its schedule file at ``schedule``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dashboard.control_worker", "beat", "--schedule", str(schedule),
         "-l", "INFO"],
        cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "REDIS_URL": os.environ["REDIS_URL"], "DATABASE_URL": database_url_of_tests(),
             "GPULSE_RETENTION_INTERVAL": "1"},
    )
    try:
        yield process
    finally:
        stop_workers([process])


def wait_until(done, what: str, logs: list[Path], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            tails = "\n".join(log.read_text()[-2000:] for log in logs)
            raise AssertionError(f"{what} within {timeout:.0f} s:\n{tails}")
        time.sleep(0.5)


@pytest.fixture
def old_and_recent_minutes():
    """Minutes 20 days old (past the 14 days kept) and a day old, none of their hours computed yet."""
    old_hour = floor_hour(timezone.now() - dt.timedelta(days=20))
    old = [minute("n1", 0, old_hour + i * MINUTE, util=40.0) for i in range(3)]
    recent = minute("n1", 0, old_hour + 19 * 24 * HOUR, util=60.0)
    return old_hour, old, recent


def test_beat_sends_passes_that_the_control_worker_runs_writing_hourly_rows_and_pruning_old_minutes(
    control_process, old_and_recent_minutes, tmp_path
):
    old_hour, old, recent = old_and_recent_minutes
    control_process.start()
    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "control-1.log"
    with beat_running(beat_log, tmp_path / "celerybeat-schedule"):
        wait_until(lambda: not GpuRollup.objects.filter(minute__lt=old_hour + HOUR).exists(),
                   "the old minutes were not pruned", [beat_log, worker_log])
    old_row = GpuRollupHour.objects.get(node="n1", gpu=0, hour=old_hour)
    assert old_row.samples == sum(m.samples for m in old) and old_row.util_mean == pytest.approx(40.0)
    assert list(GpuRollup.objects.values_list("id", flat=True)) == [recent.id]  # a day old: kept
    assert GpuRollupHour.objects.filter(hour=floor_hour(recent.minute)).exists()
    assert SENT in beat_log.read_bytes()
    assert b"retention: hourly rows written" in worker_log.read_bytes()


def test_passes_sent_while_no_control_worker_ran_expire_instead_of_running_one_after_the_other(
    control_process, old_and_recent_minutes, tmp_path
):
    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "control-1.log"
    with beat_running(beat_log, tmp_path / "celerybeat-schedule"):
        wait_until(lambda: beat_log.read_bytes().count(SENT) >= 3, "beat sent no 3 passes", [beat_log])
    sent = beat_log.read_bytes().count(SENT)
    control_process.start()
    discarded = f"Discarding revoked task: {RETENTION_TASK}".encode()
    wait_until(lambda: worker_log.read_bytes().count(discarded) == sent, "the expired passes were not discarded",
               [worker_log])
    assert b"retention: " not in worker_log.read_bytes()
    assert GpuRollup.objects.count() == 4 and not GpuRollupHour.objects.exists()
