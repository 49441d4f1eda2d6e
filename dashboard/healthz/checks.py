"""/healthz: Redis, the database, ingest and alert evaluation, each ok or failing with a reason.

Red only for gpulse's own faults: entries a node sends that the sample
contract rejects, and nodes whose clock is off, are counted in the ingest
detail, never a failure. Ingest lag is measured from each sample's arrival on
the stream, so no node's clock can make it look behind.

/healthz needs no login, so a failure is named, never described: exception
text (host names, ports, driver messages) goes to the log only.
"""

import logging
import time

import orjson
from django.conf import settings
from django.db import connection

from dashboard.redis_client import redis_client
from gpulse.keys import Keys

log = logging.getLogger(__name__)


def check_redis() -> tuple[bool, str]:
    try:
        redis_client().ping()
        return True, "ok"
    except Exception as exc:
        log.warning("healthz: Redis unreachable: %s", exc)
        return False, "unreachable"


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, "ok"
    except Exception as exc:
        log.warning("healthz: database unreachable: %s", exc)
        return False, "unreachable"


def read_heartbeat() -> dict | None:
    """Return ingest's latest heartbeat, None when there is none; raise when Redis does not answer."""
    raw = redis_client().get(Keys().ingest_heartbeat)
    return None if raw is None else orjson.loads(raw)


def check_ingest(beat: dict | None) -> tuple[bool, str]:
    if beat is None:
        return False, "not running: no heartbeat in the last minute"
    age = time.time() - beat["ts"]
    limit = settings.GPULSE_INGEST_MAX_LAG
    if age > limit:
        return False, f"stalled: last tick {age:.0f} s ago"
    outage = beat.get("database")
    if outage:
        log.warning("healthz: ingest reports the database unreachable: %s", outage["error"])
        return False, f"database unreachable for {time.time() - outage['since']:.0f} s"
    lag = beat.get("lag_max")
    if lag is not None and lag > limit:
        return False, f"lagging: samples waited {lag:.1f} s on the stream before their frame"
    return True, (f"ok: lag {lag or 0:.2f} s, {beat['nodes']} nodes, {beat.get('rejected', 0)} entries rejected, "
                  f"{beat.get('nodes_clock_skew', 0)} with clock skew")


def check_alerts(beat: dict | None) -> tuple[bool, str]:
    """The monitor of the monitor: red while ingest's alert evaluation fails."""
    if beat is None:
        return False, "unknown: ingest is not running"
    alerts = beat.get("alerts")
    if alerts is None:  # an ingest run without an evaluator (tests, tools)
        return True, "not evaluated by this ingest"
    if not alerts["ok"]:
        log.warning("healthz: ingest reports alert evaluation failing: %s", alerts["error"])
        return False, f"failing since {time.time() - alerts['failing_since']:.0f} s"
    return True, f"ok: {alerts['proposals_failed']} proposals failed"


def health() -> tuple[bool, dict]:
    try:
        beat = read_heartbeat()
    except Exception:
        unknown = (False, "unknown: Redis unreachable")
        ingest = alerts = unknown
    else:
        ingest, alerts = check_ingest(beat), check_alerts(beat)
    checks = {"redis": check_redis(), "database": check_database(), "ingest": ingest, "alerts": alerts}
    ok = all(passed for passed, _ in checks.values())
    return ok, {name: {"ok": passed, "detail": detail} for name, (passed, detail) in checks.items()}
