"""Rollups survive kill -9, SIGTERM and database outages: every minute holds exactly the samples sent.

A real `manage.py ingest` subprocess reads the session's Redis and writes a
database of this module's own (a SQLite file, or a PostgreSQL database made on
the server DATABASE_URL names), so a kill -9, a dropped connection and a
refused login are real. Samples carry a `ts` an hour in the past, so each
minute is known in advance and is complete as soon as it is sent.
"""

import datetime as dt
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict

import dj_database_url
import orjson
import pytest

from dashboard.rollups.accumulator import entry_key
from devtools.stack import ROOT
from gpulse import schema
from gpulse.keys import INGEST_GROUP, Keys
from tests.samples import sample

NODES = 6
GPUS = 4
FLUSH_INTERVAL = "0.3"
USAGE_FLUSH_INTERVAL = "2"  # longer: the kills fall between usage writes too
KEYS = Keys()
STREAMS = [KEYS.telemetry_stream(f"node-{n}") for n in range(NODES)]
SUITE_DATABASE = dj_database_url.parse(os.environ.get("DATABASE_URL") or "sqlite:///unused")
ON_POSTGRES = SUITE_DATABASE["ENGINE"].endswith("postgresql")


class RollupDatabase:
    """A database of this module's own: a URL for ingest, and plain reads for the test."""

    def __init__(self, url: str, connect):
        self.url = url
        self.connect = connect  # () -> a DB-API connection in autocommit
        self.placeholder = "?" if url.startswith("sqlite") else "%s"

    def query(self, sql: str, *params) -> list[tuple]:
        connection = self.connect()
        try:
            cursor = connection.cursor()
            cursor.execute(sql.replace("%s", self.placeholder), params)
            return cursor.fetchall() if cursor.description else []
        finally:
            connection.close()

    def migrate(self) -> None:
        done = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT,
                              env={**os.environ, "DATABASE_URL": self.url}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    def clear(self) -> None:
        self.query("DELETE FROM live_gpurollup")
        self.query("DELETE FROM live_gpuusage")
        self.query("DELETE FROM live_rollupcheckpoint")

    def rollups(self) -> dict:
        found = {}
        for node, gpu, minute, samples, util_sum, util_count in self.query(
            "SELECT node, gpu, minute, samples, util_sum, util_count FROM live_gpurollup"
        ):
            if isinstance(minute, str):  # SQLite keeps naive UTC text, as Django writes it
                minute = dt.datetime.fromisoformat(minute).replace(tzinfo=dt.UTC)
            found[(node, gpu, int(minute.timestamp()))] = (samples, util_sum, util_count)
        return found

    def usage_samples(self) -> dict:
        """(node, gpu, minute) -> samples counted in the usage, over the minute's owners."""
        found = defaultdict(int)
        for node, gpu, minute, samples in self.query("SELECT node, gpu, minute, samples FROM live_gpuusage"):
            if isinstance(minute, str):
                minute = dt.datetime.fromisoformat(minute).replace(tzinfo=dt.UTC)
            found[(node, gpu, int(minute.timestamp()))] += samples
        return dict(found)

    def checkpoint(self, of: str = "entry") -> dict[str, tuple[int, int]]:
        """Each node stream's rollup checkpoint, or with ``of="usage_entry"`` its usage's."""
        rows = self.query(f"SELECT stream, {of}_ms, {of}_seq FROM live_rollupcheckpoint")
        return {stream.removesuffix(f" {INGEST_GROUP}"): (ms, seq) for stream, ms, seq in rows}


def postgres_connect(dbname: str, user: str | None = None):
    import psycopg

    return psycopg.connect(
        host=SUITE_DATABASE["HOST"] or "127.0.0.1", port=SUITE_DATABASE["PORT"] or 5432,
        user=user or SUITE_DATABASE["USER"], password=SUITE_DATABASE["PASSWORD"] or None,
        dbname=dbname, autocommit=True,
    )


def postgres_url(dbname: str, user: str | None = None) -> str:
    password = f":{SUITE_DATABASE['PASSWORD']}" if SUITE_DATABASE["PASSWORD"] and user is None else ""
    host, port = SUITE_DATABASE["HOST"] or "127.0.0.1", SUITE_DATABASE["PORT"] or 5432
    return f"postgres://{user or SUITE_DATABASE['USER']}{password}@{host}:{port}/{dbname}"


@pytest.fixture(scope="module")
def sqlite_database(tmp_path_factory):
    path = tmp_path_factory.mktemp("durability") / "rollups.sqlite3"
    database = RollupDatabase(f"sqlite:///{path}", lambda: sqlite3.connect(path, isolation_level=None, timeout=30))
    database.path = path
    database.migrate()
    return database


@pytest.fixture(scope="module")
def postgres_database():
    if not ON_POSTGRES:
        pytest.skip("needs PostgreSQL (a dropped connection and a refused login); "
                    "runs in the suite's run with DATABASE_URL=postgres://...")
    name = f"gpulse_durability_{os.getpid()}"
    with postgres_connect(SUITE_DATABASE["NAME"]) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    database = RollupDatabase(postgres_url(name), lambda: postgres_connect(name))
    database.name = name
    database.migrate()
    yield database
    with postgres_connect(SUITE_DATABASE["NAME"]) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database(request):
    """The module's database on the vendor the suite runs on, emptied."""
    chosen = request.getfixturevalue("postgres_database" if ON_POSTGRES else "sqlite_database")
    chosen.clear()
    return chosen


class IngestProcess:
    """`manage.py ingest` as a child process, started again after each kill."""

    def __init__(self, redis_url: str, database_url: str, log_path, **env):
        self.env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1",
                    "GPULSE_ROLLUP_FLUSH_INTERVAL": FLUSH_INTERVAL, "GPULSE_USAGE_FLUSH_INTERVAL": USAGE_FLUSH_INTERVAL,
                    **env}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self, client) -> None:
        started = time.time()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "manage.py", "ingest"], cwd=ROOT, env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: heartbeat(client) and heartbeat(client)["ts"] > started, 60, "ingest's first tick", self)

    def signal(self, sig: int) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=60)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGKILL)


@pytest.fixture
def ingest_for(redis_url, tmp_path):
    started = []

    def make(database_url: str, **env) -> IngestProcess:
        process = IngestProcess(redis_url, database_url, tmp_path / f"ingest-{len(started)}.log", **env)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()


def heartbeat(client) -> dict | None:
    raw = client.get(KEYS.ingest_heartbeat)
    return orjson.loads(raw) if raw else None


def wait_for(condition, timeout: float, what: str, ingest: IngestProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; ingest log:\n{ingest.log()}" if ingest else ""))
        if ingest is not None and not ingest.alive():
            raise AssertionError(f"ingest exited while waiting for {what}; its log:\n{ingest.log()}")
        time.sleep(0.05)


class Feed:
    """NODES nodes' samples, one a second of `ts` from a minute boundary an hour ago; counts what it sent."""

    def __init__(self, client):
        self.client = client
        self.start = (int(time.time()) // 60 - 60) * 60
        self.second = 0
        self.expected: dict = defaultdict(lambda: [0, 0.0, 0])  # (node, gpu, minute) -> samples, util sum, count
        self.last_ids: dict[str, bytes] = {}  # stream -> the newest entry sent to it

    def send(self, seconds: int, pace: float = 0.0) -> None:
        """XADD ``seconds`` seconds of samples, ``pace`` seconds apart."""
        for _ in range(seconds):
            ts = self.start + self.second
            pipe = self.client.pipeline(transaction=False)
            for n in range(NODES):
                reading = sample(f"node-{n}", gpus=GPUS, ts=ts)
                for g, gpu in enumerate(reading["gpus"]):
                    gpu["util"] = (self.second * 7 + g * 13 + n) % 101
                    row = self.expected[(f"node-{n}", g, ts // 60 * 60)]
                    row[0] += 1
                    row[1] += gpu["util"]
                    row[2] += 1
                # An hour old, as a collector's backlog after an outage is: it says how long it held them.
                pipe.xadd(STREAMS[n], {"s": schema.encode(reading), "held": str(time.time() - ts)})
            self.last_ids.update(zip(STREAMS, pipe.execute(), strict=True))
            self.second += 1
            if pace:
                time.sleep(pace)

    def exact(self) -> dict:
        return {key: tuple(value) for key, value in self.expected.items()}


def caught_up(database: RollupDatabase, client, feed: Feed) -> bool:
    sent = {stream: entry_key(entry_id) for stream, entry_id in feed.last_ids.items()}
    return (database.checkpoint() == database.checkpoint("usage_entry") == sent
            and all(client.xpending(stream, INGEST_GROUP)["pending"] == 0 for stream in STREAMS))


def assert_every_minute_exact(database: RollupDatabase, client, feed: Feed, ingest: IngestProcess, when: str) -> None:
    deadline = time.monotonic() + 60
    while not caught_up(database, client, feed) and time.monotonic() < deadline:
        assert ingest.alive(), f"ingest exited ({when}); its log:\n{ingest.log()}"
        time.sleep(0.05)
    found = database.rollups()
    expected = feed.exact()
    wrong = {key: (found.get(key), want) for key, want in expected.items() if found.get(key) != want}
    assert not wrong and set(found) == set(expected), f"{when}: (found, sent) per GPU minute differ: {wrong}"
    counted = database.usage_samples()
    wrong = {key: (counted.get(key), want[0]) for key, want in expected.items() if counted.get(key) != want[0]}
    assert not wrong and set(counted) == set(expected), f"{when}: usage samples (found, sent) differ: {wrong}"
    assert caught_up(database, client, feed), f"{when}: entries left unwritten or unacknowledged:\n{ingest.log()}"


def test_kill_9_and_sigterm_at_any_point_of_a_minute_lose_nothing_and_count_nothing_twice(
    database, redis_client, ingest_for
):
    feed = Feed(redis_client)
    ingest = ingest_for(database.url)
    ingest.start(redis_client)

    feed.send(25, pace=0.03)  # mid-minute, while samples pour in
    ingest.signal(signal.SIGKILL)
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after kill -9 mid-minute")

    feed.send(10, pace=0.03)
    written = database.checkpoint()
    wait_for(lambda: database.checkpoint() != written, 30, "a rollup write", ingest)
    # Just after a write committed, as it acknowledges; most often a write of the rollups alone,
    # whose entries count again for their usage.
    ingest.signal(signal.SIGKILL)
    feed.send(5)  # arrives while ingest is down
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after kill -9 just after a write")

    feed.send(30, pace=0.03)  # across the minute's end: two minutes open at once
    ingest.signal(signal.SIGKILL)
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after kill -9 across a minute boundary")

    feed.send(20, pace=0.03)
    assert ingest.signal(signal.SIGTERM) == 0  # a deploy
    delivered = {stream: entry_key(next(g for g in redis_client.xinfo_groups(stream)
                                        if g["name"] == INGEST_GROUP.encode())["last-delivered-id"])
                 for stream in STREAMS}
    assert all(redis_client.xpending(stream, INGEST_GROUP)["pending"] == 0 for stream in STREAMS), \
        "SIGTERM acknowledges what it read"
    assert database.checkpoint() == delivered, "... once it is written"
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after SIGTERM")

    feed.send(60)  # a backlog at full speed
    ingest.signal(signal.SIGKILL)
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after kill -9 amid a backlog")
    assert len(database.rollups()) == NODES * GPUS * 3


def test_a_crash_between_the_write_and_the_acknowledgement_counts_nothing_twice(
    database, redis_client, ingest_for
):
    feed = Feed(redis_client)
    ingest = ingest_for(database.url)
    feed.send(20)
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "first run")
    ingest.signal(signal.SIGKILL)
    # As if the last write's XACK never reached Redis: its entries are pending again.
    for stream in STREAMS:
        redis_client.xgroup_setid(stream, INGEST_GROUP, "0")
    redis_client.xreadgroup(INGEST_GROUP, "killed", dict.fromkeys(STREAMS, ">"), count=10_000)
    assert all(redis_client.xpending(stream, INGEST_GROUP)["pending"] == redis_client.xlen(stream)
               for stream in STREAMS)
    ingest.start(redis_client)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after re-reading written entries")


def health_details(seen: list) -> None:
    from dashboard.healthz.checks import check_ingest, read_heartbeat

    seen.append(check_ingest(read_heartbeat())[1])


def test_ingest_rides_out_a_dropped_connection_and_40_s_of_refused_logins(postgres_database, redis_client, ingest_for):
    database = postgres_database
    database.clear()
    role = f"gpulse_ingest_{os.getpid()}"
    with postgres_connect(database.name) as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    ingest = ingest_for(postgres_url(database.name, user=role))
    feed = Feed(redis_client)
    try:
        ingest.start(redis_client)
        feed.send(30, pace=0.02)
        assert_every_minute_exact(database, redis_client, feed, ingest, "before the outage")
        with postgres_connect(database.name) as admin:
            admin.execute(f'ALTER ROLE "{role}" NOLOGIN')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        seen: list[str] = []
        refused_until = time.monotonic() + 40
        while time.monotonic() < refused_until:
            feed.send(1, pace=0.5)
            health_details(seen)
            assert ingest.alive(), f"ingest exited during the outage:\n{ingest.log()}"
        with postgres_connect(database.name) as admin:
            admin.execute(f'ALTER ROLE "{role}" LOGIN')
        assert any(detail.startswith("database unreachable") for detail in seen), seen
        feed.send(30, pace=0.01)
        assert_every_minute_exact(database, redis_client, feed, ingest, "after 40 s of refused logins")
        # The heartbeat goes out before the tick's write: the next tick's says the database is back.
        wait_for(lambda: health_details(seen) or not seen[-1].startswith("database unreachable"), 10,
                 "/healthz to see the database back", ingest)
    finally:
        ingest.stop()
        with postgres_connect(database.name) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_ingest_rides_out_a_locked_sqlite_database(sqlite_database, redis_client, ingest_for):
    database = sqlite_database
    database.clear()
    ingest = ingest_for(database.url, GPULSE_SQLITE_BUSY_TIMEOUT="0.5")
    feed = Feed(redis_client)
    ingest.start(redis_client)
    feed.send(30, pace=0.02)
    assert_every_minute_exact(database, redis_client, feed, ingest, "before the lock")
    locker = sqlite3.connect(database.path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another writer holds the database: every write of ingest's fails
    seen: list[str] = []
    try:
        locked_until = time.monotonic() + 8
        while time.monotonic() < locked_until:
            feed.send(2, pace=0.25)
            health_details(seen)
            assert ingest.alive(), f"ingest exited while the database was locked:\n{ingest.log()}"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert any(detail.startswith("database unreachable") for detail in seen), seen
    feed.send(30, pace=0.01)
    assert_every_minute_exact(database, redis_client, feed, ingest, "after the lock")
    wait_for(lambda: health_details(seen) or not seen[-1].startswith("database unreachable"), 10,
             "/healthz to see the database back", ingest)
