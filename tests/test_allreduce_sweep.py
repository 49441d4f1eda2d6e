"""The sweep's arithmetic, sizes, parameters and data pattern (no processes)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulse.sweep_spec import (
    DTYPES,
    OPS,
    Row,
    SpecError,
    SweepSpec,
    algbw,
    busbw,
    format_size,
    parse_size,
    sweep_sizes,
)
from workers.collective import pattern_for
from workers.errors import LINE_CHARS, in_a_line
from workers.report import footer_lines, row_line

MiB = 1 << 20
ROOT = Path(__file__).resolve().parent.parent


def test_algbw_is_bytes_per_second_in_decimal_gigabytes():
    assert algbw(10**9, 1.0) == 1.0
    assert algbw(16 * MiB, 0.01) == pytest.approx(1.6777216)


def test_busbw_of_one_rank_is_zero_as_in_nccl_tests():
    assert busbw("all_reduce", algbw(16 * MiB, 1e-6), 1) == 0


def test_busbw_of_two_ranks_equals_algbw():
    assert busbw("all_reduce", 3.0, 2) == 3.0


def test_busbw_of_eight_ranks_is_seven_quarters_of_algbw():
    assert busbw("all_reduce", 4.0, 8) == pytest.approx(7.0)


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("1K", 1024), ("1k", 1024), ("64M", 64 * MiB), ("1G", 1 << 30), ("16MiB", 16 * MiB),
    ("8KB", 8192), (512, 512),
])
def test_it_parses_sizes_with_binary_suffixes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1X", "-1K", "1.5M", "M", "1 T", "9" * 5000])
def test_it_refuses_bad_sizes_with_an_example(text):
    with pytest.raises(SpecError, match="e.g. 64M"):
        parse_size(text)


def test_a_bad_size_is_quoted_short():
    with pytest.raises(SpecError) as refused:
        parse_size("9" * 5000)
    assert len(str(refused.value)) < 200


@pytest.mark.parametrize("size, text", [(8 << 30, "8G"), (1 << 20, "1M"), (1536, "1536"), (3 << 10, "3K"), (0, "0")])
def test_format_size_is_the_inverse_of_parse_size(size, text):
    assert format_size(size) == text and parse_size(text) == size


def test_the_web_side_of_a_sweep_loads_neither_torch_nor_the_rank_runtime():
    # The web and the control worker import the spec, the statuses, the
    # report and the benchmark views; the ranks' runtime and torch stay out.
    code = ("import sys, django; django.setup(); "
            "import gpulse.sweep_spec, gpulse.job_status; "
            "import dashboard.benchmarks.api, dashboard.benchmarks.views, dashboard.benchmarks.tasks; "
            "print(sorted({'torch', 'workers.collective', 'workers.launcher'} & set(sys.modules)))")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="dashboard.settings")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_sweep_sizes_step_by_the_factor_up_to_max():
    assert sweep_sizes(1024, 16384, 2, 4) == [1024, 2048, 4096, 8192, 16384]
    assert sweep_sizes(1024, 16384, 4, 4) == [1024, 4096, 16384]


def test_sweep_sizes_stop_below_a_max_off_the_grid():
    assert sweep_sizes(1024, 10_000, 2, 4) == [1024, 2048, 4096, 8192]


def test_sweep_sizes_are_whole_elements_without_repeats():
    assert sweep_sizes(1, 16, 2, 4) == [4, 8, 16]
    assert sweep_sizes(3, 12, 2, 2) == [2, 6, 12]


@pytest.mark.parametrize("fields, message", [
    ({"min_bytes": 2048, "max_bytes": 1024}, "max bytes (1024) is smaller than min bytes (2048)"),
    ({"dtype": "float64"}, "unknown dtype 'float64'"),
    ({"backend": "mpi"}, "unknown backend 'mpi'"),
    ({"factor": 1}, "step factor must be an integer of at least 2"),
    ({"iters": 0}, "timed iterations must be at least 1"),
    ({"nnodes": 2}, "multi-node job needs a master port"),
    ({"nnodes": 2, "node_rank": 2, "master_port": 29500}, "node rank 2 is outside 0..1"),
    ({"ranks_per_node": 2, "corrupt_rank": 2}, "corrupt rank 2 is not a rank of this job"),
    ({"timeout": 0}, "timeout must be positive"),
])
def test_a_bad_parameter_is_refused_with_a_reason(fields, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SweepSpec(**fields)


def test_global_ranks_follow_the_node_rank():
    spec = SweepSpec(nnodes=3, node_rank=2, ranks_per_node=4, master_port=29500)
    assert spec.world_size == 12
    assert [spec.global_rank(local) for local in range(4)] == [8, 9, 10, 11]


def test_a_spec_travels_as_a_dict():
    spec = SweepSpec(backend="gloo", ranks_per_node=2, dtype="float16", check=False)
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SpecError, match="unknown sweep parameters: colour"):
        SweepSpec.from_dict({**spec.to_dict(), "colour": "red"})


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("world", [1, 2, 3, 8, 100, 256, 300, 5000])
def test_expected_sums_stay_exact_in_the_dtype(dtype, world):
    pattern = pattern_for(world, dtype)
    sums = [pattern.expected(slot) for slot in range(pattern.modulus)]
    assert max(sums) <= DTYPES[dtype].exact_limit
    assert pattern.modulus >= 2


def test_expected_sums_differ_between_slots_even_when_ranks_fill_whole_periods():
    # 8 ranks with modulus 8: a pattern of (i + r) mod 8 would sum to 28
    # everywhere and miss misplaced data; this one must not.
    pattern = pattern_for(8, "float32")
    assert pattern.modulus == 8
    assert len({pattern.expected(slot) for slot in range(8)}) > 1


def _row(size, inplace, wrong):
    return Row(size=size, count=size // 4, type="float", redop="sum", time_us=1234.5, algbw=0.85,
               busbw=0.85, wrong=wrong, inplace=inplace)


def test_a_table_line_holds_out_of_place_then_in_place():
    line = row_line(OPS["all_reduce"], _row(1024, False, 0), _row(1024, True, 3))
    assert line.split() == ["1024", "256", "float", "sum", "-1", "1234.50", "0.85", "0.85", "0",
                            "1234.50", "0.85", "0.85", "3"]


def test_the_footer_fails_on_wrong_values_and_says_when_unchecked():
    spec = SweepSpec()
    assert footer_lines(spec, [_row(1024, False, 0), _row(1024, True, 3)])[0] == "# Out of bounds values : 3 FAILED"
    assert footer_lines(spec, [_row(1024, False, None)])[0] == "# Out of bounds values : N/A (check off)"
    assert footer_lines(spec, [_row(1024, False, 0)]) == [
        "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.85", "#",
        "# Collective test concluded: all_reduce_perf"]


def test_an_exception_is_one_bounded_line_for_a_reason():
    torch_like = RuntimeError("NCCL error: unhandled system error\n"
                              "Exception raised from ... (most recent call first):\n#0 c10::")
    assert in_a_line(torch_like) == "RuntimeError: NCCL error: unhandled system error"
    assert in_a_line(SpecError("unknown sweep parameters: algorithm"), with_type=False) == \
        "unknown sweep parameters: algorithm"
    assert in_a_line(ValueError("\n \nx\ny")) == "ValueError: x"  # the first line with words
    assert len(in_a_line(ValueError("y" * 10_000))) == LINE_CHARS
