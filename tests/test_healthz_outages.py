"""The anonymous /healthz names a failing part without its error text: during a database outage it showed
the driver's words (host, port, "Is the server running…"); the operator finds them in the log."""

import time

import psycopg
import pytest

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.live.ingest import Ingest
from devtools.redis_server import free_port
from tests.ingest_stages import STAGES, with_alerts

pytestmark = pytest.mark.django_db


def driver_error() -> psycopg.OperationalError:
    """What the PostgreSQL driver says when nothing listens at the database's address."""
    port = free_port()
    try:
        psycopg.connect(f"host=127.0.0.1 port={port} dbname=gpulse connect_timeout=2")
    except psycopg.OperationalError as exc:
        assert str(port) in str(exc)
        return exc
    raise AssertionError("a database answered on a free port")


def test_an_ingest_database_outage_is_named_on_healthz_without_the_drivers_text(client, redis_client, caplog):
    error = driver_error()
    ingest = Ingest(redis_client, lambda frame: True, stages=STAGES)
    now = time.time()
    ingest.database.failed(error, now - 12)
    ingest.emit(now)
    response = client.get("/healthz")
    assert response.status_code == 503
    ingest_check = response.json()["checks"]["ingest"]
    assert not ingest_check["ok"] and ingest_check["detail"].startswith("database unreachable for 1")
    body = response.content.decode()
    for leaked in ("127.0.0.1", str(error).split("port ")[1][:5], "connection", "Is the server running"):
        assert leaked not in body, leaked
    assert str(error).strip().splitlines()[0] in caplog.text  # the operator finds it in the log


def test_failing_alert_evaluation_is_named_on_healthz_without_its_error_text(client, redis_client,
                                                                           django_db_blocker, caplog):
    ingest = Ingest(redis_client, lambda frame: True, stages=with_alerts(AlertEvaluator(reload_every=0)))
    with django_db_blocker.block():  # the evaluator's database stops answering
        ingest.emit(time.time())
        ingest.emit(time.time())
    alerts = client.get("/healthz").json()["checks"]["alerts"]
    assert not alerts["ok"] and alerts["detail"].startswith("failing since ")
    assert "Database access not allowed" not in alerts["detail"]
    assert "Database access not allowed" in caplog.text
