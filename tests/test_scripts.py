"""The measurement scripts the README's performance section names still run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_ingest_durability import ON_POSTGRES, SUITE_DATABASE, postgres_connect, postgres_url

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_side_by_side_benchmark_compares_the_engine_with_a_plain_loop():
    done = run("-m", "devtools.bench_allreduce", "--rounds", "1", "--min-bytes", "64K", "--max-bytes", "64K",
               "--iters", "2", "--warmup", "1")
    assert done.returncode == 0, done.stderr
    row = next(line.split() for line in done.stdout.splitlines() if line.strip().startswith("65536"))
    engine, plain = float(row[1]), float(row[2])
    assert engine > 0 and plain > 0


def test_the_collector_cpu_measure_reports_every_sample():
    done = run("-m", "devtools.measure_collector_cpu", "--duration", "2", "--interval", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    # One tick may slip on a loaded 2-core CI machine; the script still counts it.
    assert figures["expected_samples"] == 4 and figures["samples"] >= 3
    assert 0 < figures["cpu_percent"] < 100


def test_the_contract_benchmark_times_every_way_of_reading_a_sample():
    # It compares with the parse of an older commit, read from git: a checkout
    # without that history (a shallow clone) cannot run the comparison.
    history = subprocess.run(["git", "cat-file", "-e", "ece1447"], cwd=ROOT, capture_output=True)
    if history.returncode != 0:
        pytest.skip("the benchmark's baseline commit is not in this checkout's history")
    done = run("-m", "devtools.bench_parse", "--nodes", "20", "--repeat", "2", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["samples"] == 20
    assert 0 < figures["json_only_us_per_sample"] < figures["checked_us_per_sample"]
    assert figures["now_us_per_sample"] > 0 and figures["before_us_per_sample"] > 0


def test_the_node_health_benchmark_times_a_tick():
    done = run("-m", "devtools.bench_node_health", "--nodes", "200", "--ticks", "3", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["nodes"] == 200 and 0 < figures["tick_ms_median"] <= figures["tick_ms_max"]


def test_the_usage_benchmark_times_ingest_with_and_without_the_accounting():
    # Without DATABASE_URL it makes a SQLite file of its own: it deletes the rows of the database it uses.
    done = subprocess.run(
        [sys.executable, "-m", "devtools.bench_usage", "ingest", "--nodes", "20", "--seconds", "5", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={name: value for name, value in os.environ.items() if name != "DATABASE_URL"})
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["gpus"] == 160 and figures["database"] == "sqlite"
    assert 0 < figures["cpu_ms_per_s_without_usage"] and 0 < figures["cpu_ms_per_s_with_usage"]


@pytest.mark.database
@pytest.mark.skipif(not ON_POSTGRES, reason="the 30-day query benchmark writes by COPY: PostgreSQL only; "
                                           "runs in the suite's run with DATABASE_URL=postgres://...")
def test_the_usage_query_benchmark_answers_every_query_over_generated_rows():
    with postgres_connect(SUITE_DATABASE["NAME"]) as connection:
        connection.execute("DROP DATABASE IF EXISTS gpulse_bench_usage_test")
        connection.execute("CREATE DATABASE gpulse_bench_usage_test")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "devtools.bench_usage", "query", "--days", "1", "--nodes", "10", "--repeat", "1",
             "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "DATABASE_URL": postgres_url("gpulse_bench_usage_test")})
        assert done.returncode == 0, done.stderr
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        assert figures["database"] == "postgresql" and figures["usage_hour_rows"] > 24 * 10
        assert set(figures["queries"]) == {"by_user", "by_job", "by_node", "by_job_all", "chart"}
    finally:
        with postgres_connect(SUITE_DATABASE["NAME"]) as connection:
            connection.execute("DROP DATABASE IF EXISTS gpulse_bench_usage_test WITH (FORCE)")
