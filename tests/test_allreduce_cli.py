"""`manage.py allreduce` as a person runs it: a real subprocess, real ranks."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests import nccl_tests_parser
from tests.test_allreduce_engine import rank_processes
from workers.report import float_str

ROOT = Path(__file__).resolve().parent.parent
# A real all_reduce_perf run (16 H100s on 2 nodes), as published in
# lessizzmore/create-a3mega-ztan-fork, ztan-NCCL-test-result.
REAL_NCCL_TESTS = ROOT / "tests" / "data" / "nccl-tests-all_reduce_perf.txt"
SMALL = ["--backend", "gloo", "--ranks-per-node", "2", "--min-bytes", "1K", "--max-bytes", "8K",
         "--iters", "2", "--warmup", "1"]


def allreduce(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "allreduce", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_it_prints_a_table_like_all_reduce_perf():
    done = allreduce(*SMALL)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = [line for line in lines if line.startswith("#")]
    data = [line.split() for line in lines if not line.startswith("#")]
    assert "# gpulse all_reduce: backend gloo  ranks 2 (1 node(s) x 2)" in header
    assert ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong"] in [line.split() for line in header]
    assert [row[:5] for row in data] == [[str(size), str(size // 4), "float", "sum", "-1"]
                                        for size in (1024, 2048, 4096, 8192)]
    assert all(len(row) == 13 and row[8] == "0" and row[12] == "0" for row in data)
    assert all(float(row[5]) > 0 and float(row[7]) == float(row[6]) for row in data)  # busbw = algbw at n=2
    assert lines[-4] == "# Out of bounds values : 0 OK"
    assert lines[-3].startswith("# Avg bus bandwidth    : ")
    assert lines[-2:] == ["#", "# Collective test concluded: all_reduce_perf"]
    busbw = [float(row[7]) for row in data] + [float(row[11]) for row in data]
    assert float(lines[-3].split(":")[1]) == pytest.approx(sum(busbw) / len(busbw), abs=0.01)
    # nccl-tests' own parameter line, which its parsers look for.
    assert ("# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 1 iters: 2"
            " agg iters: 1 validation: 1 graph: 0") in header


def test_an_nccl_tests_parser_reads_the_table_row_by_row():
    done = allreduce(*SMALL)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]

    report = nccl_tests_parser.parse_table(done.stdout)

    assert [result.size for result in report.results] == [1024, 2048, 4096, 8192]
    for result, row in zip(report.results, rows, strict=True):
        assert (result.out_of_place.time, result.out_of_place.algbw, result.out_of_place.busbw) == (
            float(row[5]), float(row[6]), float(row[7]))
        assert (result.in_place.time, result.in_place.algbw, result.in_place.busbw) == (
            float(row[9]), float(row[10]), float(row[11]))
        assert result.out_of_place.wrong == 0 and result.in_place.wrong == 0
    assert report.avg_busbw == float(done.stdout.splitlines()[-3].split(":")[1])


def test_the_nccl_tests_json_layout_reads_like_all_reduce_perf_dash_j():
    done = allreduce(*SMALL, "--json", "nccl-tests")

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["version"], document["env"]) == (2, [])
    assert document["config"]["minimum_bytes"] == 1024 and document["config"]["maximum_bytes"] == 8192
    assert document["out_of_bounds"] == {"count": 0, "okay": "true"}  # util.cu's jsonBool writes strings
    report = nccl_tests_parser.parse_json(document)
    assert [result.size for result in report.results] == [1024, 2048, 4096, 8192]
    for result, record in zip(report.results, document["results"], strict=True):
        assert (record["type"], record["redop"], record["root"], record["count"]) == (
            "float", "sum", "    -1", result.size // 4)
        for measurement in (result.out_of_place, result.in_place):
            assert measurement.time > 0 and measurement.busbw == measurement.algbw and measurement.wrong == 0
    measurements = [m for result in report.results for m in (result.out_of_place, result.in_place)]
    assert report.avg_busbw == pytest.approx(sum(m.busbw for m in measurements) / len(measurements))


def test_the_nccl_tests_parser_reads_a_real_all_reduce_perf_log():
    # The parser is checked against the real thing, so the tests above prove a match with nccl-tests.
    report = nccl_tests_parser.parse_table(REAL_NCCL_TESTS.read_text())

    assert [result.size for result in report.results] == [8 << shift for shift in range(31)]
    last = report.results[-1]
    assert last.out_of_place == nccl_tests_parser.Measurement(time=47535, algbw=180.71, busbw=338.82, wrong=0)
    assert last.in_place == nccl_tests_parser.Measurement(time=47743, algbw=179.92, busbw=337.35, wrong=0)
    assert report.avg_busbw == 70.742


def test_with_the_check_off_the_parser_reads_wrong_as_not_available():
    done = allreduce(*SMALL, "--no-check", "--max-bytes", "1K")
    assert done.returncode == 0, done.stderr

    [result] = nccl_tests_parser.parse_table(done.stdout).results

    assert result.out_of_place.wrong is None and result.in_place.wrong is None


def test_json_output_has_exactly_the_documented_fields():
    done = allreduce(*SMALL, "--dtype", "bfloat16", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"backend", "world_size", "dtype", "rows", "avg_busbw", "versions"}
    assert (result["backend"], result["world_size"], result["dtype"]) == ("gloo", 2, "bfloat16")
    assert [(row["size"], row["inplace"]) for row in result["rows"]] == [
        (size, inplace) for size in (1024, 2048, 4096, 8192) for inplace in (False, True)]
    for row in result["rows"]:
        assert set(row) == {"size", "count", "type", "redop", "time_us", "algbw", "busbw", "wrong", "inplace"}
        assert (row["type"], row["redop"], row["wrong"], row["count"]) == ("bfloat16", "sum", 0, row["size"] // 2)
    assert result["avg_busbw"] == pytest.approx(sum(row["busbw"] for row in result["rows"]) / 8)
    assert result["versions"]["torch"] and result["versions"]["python"]


def test_wrong_values_fail_the_command_after_the_table():
    out = io.StringIO()
    with pytest.raises(CommandError, match="^4 wrong values: the all_reduce returned wrong results$"):
        call_command("allreduce", *SMALL, "--max-bytes", "1K", "--corrupt-rank", "0", stdout=out)

    assert out.getvalue().splitlines()[-4] == "# Out of bounds values : 4 FAILED"


def test_a_bad_size_is_one_clear_line_not_a_traceback():
    done = allreduce("--max-bytes", "12X")

    assert done.returncode != 0
    assert "argument --max-bytes: bad size '12X'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--min-bytes", "2K", "--max-bytes", "1K"], "max bytes (1024) is smaller than min bytes (2048)"),
    (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
    (["--min-bytes", "1.5M"], "argument --min-bytes: bad size '1.5M'"),
    (["--factor", "1"], "step factor must be an integer of at least 2, not 1"),
    (["--backend", "gloo", "--ranks-per-node", "2", "--corrupt-rank", "5"], "corrupt rank 5 is not a rank of this job"),
])
def test_bad_arguments_raise_a_command_error(args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command("allreduce", *args)


def test_killing_the_command_leaves_no_rank_behind():
    command = subprocess.Popen([sys.executable, "manage.py", "allreduce", "--backend", "gloo", "--ranks-per-node",
                                "2", "--min-bytes", "1K", "--max-bytes", "16M", "--iters", "50"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in command.stdout:  # wait for the ranks to be mid-sweep
            if not line.startswith("#"):
                break
        assert len(rank_processes(command.pid)) == 2
        command.send_signal(signal.SIGKILL)
        command.wait()
        stop_by = time.monotonic() + 5
        while rank_processes(command.pid) and time.monotonic() < stop_by:
            time.sleep(0.1)
        assert rank_processes(command.pid) == []
    finally:
        command.kill()
        command.wait()
        for orphan in rank_processes(command.pid):
            orphan.kill()


def as_a_terminals_foreground_job() -> None:
    # A shell without job control (a script's `make test &`) starts its background jobs with SIGINT
    # ignored; an ignored SIGINT stays ignored across exec, and Python then raises no KeyboardInterrupt:
    # the command would sweep on. A terminal's foreground job has it at its default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_ranks_and_says_so():
    command = subprocess.Popen([sys.executable, "manage.py", "allreduce", "--backend", "gloo", "--ranks-per-node",
                                "1", "--min-bytes", "1K", "--max-bytes", "64M", "--iters", "50", "--no-check"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=as_a_terminals_foreground_job)
    try:
        for line in command.stdout:
            if not line.startswith("#"):
                break
        os.killpg(command.pid, signal.SIGINT)  # what a terminal sends to the foreground group
        _, stderr = command.communicate(timeout=15)
        assert command.returncode == 1
        assert "CommandError: interrupted; every rank was stopped" in stderr
        assert "Traceback" not in stderr
        assert rank_processes(command.pid) == []
    finally:
        command.kill()
        command.wait()


@pytest.mark.parametrize("value, time, bandwidth", [
    (0.5, "   0.50", "  0.50"),
    (123.456, " 123.46", "123.46"),
    (1234.5, "1234.50", "1234.5"),
    (12345.6, "12345.6", " 12346"),
    (123456.0, " 123456", "123456"),
    (12345678.0, "1.2e+07", " 1e+07"),
])
def test_times_and_bandwidths_take_nccl_tests_current_precision(value, time, bandwidth):
    # util.cu's getFloatStr: two decimals while they fit the column, then one, none, an exponent.
    assert (float_str(value, 7), float_str(value, 6)) == (time, bandwidth)
