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

from tests.test_allreduce_engine import rank_processes

ROOT = Path(__file__).resolve().parent.parent
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
    assert lines[-2] == "# Out of bounds values : 0 OK"
    assert lines[-1].startswith("# Avg bus bandwidth    : ")
    busbw = [float(row[7]) for row in data] + [float(row[11]) for row in data]
    assert float(lines[-1].split(":")[1]) == pytest.approx(sum(busbw) / len(busbw), abs=0.01)


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
    with pytest.raises(CommandError, match="^4 wrong values: the all-reduce returned wrong sums$"):
        call_command("allreduce", *SMALL, "--max-bytes", "1K", "--corrupt-rank", "0", stdout=out)

    assert out.getvalue().splitlines()[-2] == "# Out of bounds values : 4 FAILED"


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


def test_ctrl_c_stops_the_ranks_and_says_so():
    command = subprocess.Popen([sys.executable, "manage.py", "allreduce", "--backend", "gloo", "--ranks-per-node",
                                "1", "--min-bytes", "1K", "--max-bytes", "64M", "--iters", "50", "--no-check"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
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
