"""/healthz: Redis, the database and ingest, each ok or failing with a reason."""

import time

import orjson
from django.conf import settings
from django.db import connection

from dashboard.redis_client import redis_client
from gpulse.keys import Keys


def check_redis() -> tuple[bool, str]:
    try:
        redis_client().ping()
        return True, "ok"
    except Exception as exc:
        return False, f"unreachable: {exc}"


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, "ok"
    except Exception as exc:
        return False, f"unreachable: {exc}"


def check_ingest() -> tuple[bool, str]:
    try:
        raw = redis_client().get(Keys().ingest_heartbeat)
    except Exception:
        return False, "unknown: Redis unreachable"
    if raw is None:
        return False, "not running: no heartbeat in the last minute"
    beat = orjson.loads(raw)
    age = time.time() - beat["ts"]
    limit = settings.GPULSE_INGEST_MAX_LAG
    if age > limit:
        return False, f"stalled: last tick {age:.0f} s ago"
    outage = beat.get("database")
    if outage:
        return False, f"database unreachable for {time.time() - outage['since']:.0f} s: {outage['error']}"
    lag = beat.get("lag_max")
    if lag is not None and lag > limit:
        return False, f"lagging: newest samples are {lag:.1f} s old when sent"
    return True, f"ok: lag {lag or 0:.2f} s, {beat['nodes']} nodes"


def health() -> tuple[bool, dict]:
    checks = {"redis": check_redis(), "database": check_database(), "ingest": check_ingest()}
    ok = all(passed for passed, _ in checks.values())
    return ok, {name: {"ok": passed, "detail": detail} for name, (passed, detail) in checks.items()}
