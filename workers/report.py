"""Present a sweep like nccl-tests' binary for its operation (all_reduce_perf,
all_gather_perf, …): a '#' header, one line per size (out-of-place, then
in-place), the closing summary; or as JSON, gpulse's own or nccl-tests' `-J`
layout. Lines and fields follow nccl-tests' src/util.cu (writeDeviceReport,
writeResultHeader, writeBenchmarkLineBody, writeResultFooter) so parsers
written for nccl-tests read them unchanged."""

from __future__ import annotations

import math
import time

from gpulse.sweep_spec import Collective, Row, SweepSpec, avg_busbw

_HEAD = "# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s" * 2
_LINE = "%12d  %12d  %8s  %6s  %6d"
_LABELS = "# %10s  %12s  %8s  %6s  %6s" % ("", "", "", "", "")
_BLOCK = len("  %7s  %6s  %6s  %6s" % ("", "", "", ""))
NCCL_TESTS_JSON_VERSION = 2  # util.cu's JSON_FILE_VERSION


def wrong_total(rows: list[Row]) -> int | None:
    """Return the wrong elements over all rows, or None when nothing was checked."""
    checked = [row.wrong for row in rows if row.wrong is not None]
    return sum(checked) if checked else None


# What the placements mean where torch.distributed differs from NCCL's calls.
PLACEMENT_NOTES = {
    "all_reduce": "out-of-place: a copy into the output, then the in-place all_reduce (torch.distributed has no other)",
    "broadcast": "out-of-place: a copy into the output, then the in-place broadcast (torch.distributed has no other)",
    "reduce": "out-of-place: a copy into the output, then the in-place reduce (torch.distributed has no other)",
    "alltoall": "in-place: not measured (torch.distributed has no in-place alltoall)",
    "sendrecv": "in-place: not measured (a send and a receive on one buffer race)",
}


def header_lines(spec: SweepSpec, versions: dict) -> list[str]:
    world = spec.world_size
    program = spec.collective.program
    lines = [
        f"# gpulse {spec.op}: backend {spec.backend}  ranks {world} ({spec.nnodes} node(s) x {spec.ranks_per_node})",
        f"# Collective test starting: {program}",
        # nccl-tests' own line: every rank is a process with one GPU, as `mpirun -np N all_reduce_perf -g 1`.
        f"# nThread 1 nGpus 1 minBytes {spec.min_bytes} maxBytes {spec.max_bytes} step: {spec.factor}(factor)"
        f" warmup iters: {spec.warmup} iters: {spec.iters} agg iters: 1 validation: {int(spec.check)} graph: 0",
        "# " + "  ".join(f"{name} {value or '-'}" for name, value in versions.items()),
    ]
    if spec.op in PLACEMENT_NOTES:
        lines.append("# " + PLACEMENT_NOTES[spec.op])
    if world == 1 and spec.collective.bus_factor(1) == 0:
        lines.append("# one rank: nothing crosses a link, so busbw is 0 (as in nccl-tests)"
                     " and algbw measures no transfer")
    return lines + [
        "#",
        (_LABELS + "out-of-place".center(_BLOCK) + "in-place".center(_BLOCK)).rstrip(),
        _HEAD % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"),
        (_HEAD % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
                  "")).rstrip(),
    ]


def float_str(value: float, width: int) -> str:
    """Return value in width columns as nccl-tests' getFloatStr: fewer decimals as it grows, then exponent."""
    if not math.isfinite(value):
        return "%*g" % (width, value)
    digits = 0  # digits before the point: 0 below 1
    step = 1
    while value >= step:
        digits += 1
        step *= 10
    if digits < width - 2:
        return "%*.2f" % (width, value)
    if digits < width - 1:
        return "%*.1f" % (width, value)
    if digits < width + 1:
        return "%*.0f" % (width, value)
    return "%*.1e" % (width, value) if width >= 7 else "%*.0e" % (width, value)


def _measurement(row: Row) -> str:
    measured = "  %7s  %6s  %6s" % (float_str(row.time_us, 7), float_str(row.algbw, 6), float_str(row.busbw, 6))
    if row.wrong is None:
        return measured + "    N/A"
    return measured + "  %6g" % row.wrong


_NOT_MEASURED = "  %7s  %6s  %6s  %6s" % ("N/A", "N/A", "N/A", "N/A")


def row_line(op: Collective, outplace: Row, inplace: Row | None) -> str:
    """One size's line: ``inplace`` None for an operation without an in-place form."""
    return (_LINE % (outplace.size, outplace.count, outplace.type, outplace.redop, op.root)
            + _measurement(outplace) + (_measurement(inplace) if inplace else _NOT_MEASURED))


class LineByLine:
    """The table's lines as rank 0's rows come: a size's line once its last row (in-place, where there is one) is in."""

    def __init__(self, spec: SweepSpec):
        self.op = spec.collective
        self._outplace: Row | None = None

    def add(self, row: Row) -> str | None:
        if not row.inplace and self.op.in_place:
            self._outplace = row
            return None
        if row.inplace:
            assert self._outplace is not None, "an in-place row comes after its size's out-of-place one"
            return row_line(self.op, self._outplace, row)
        return row_line(self.op, row, None)


def footer_lines(spec: SweepSpec, rows: list[Row]) -> list[str]:
    wrong = wrong_total(rows)
    verdict = "N/A (check off)" if wrong is None else f"{wrong} {'FAILED' if wrong else 'OK'}"
    return [f"# Out of bounds values : {verdict}", f"# Avg bus bandwidth    : {avg_busbw(rows):g}",
            "#", f"# Collective test concluded: {spec.collective.program}"]


def table_lines(spec: SweepSpec, versions: dict, rows: list[Row]) -> list[str]:
    """Return a finished sweep's whole report: header, a line per size (out-of-place beside in-place), footer."""
    lines = LineByLine(spec)
    return [*header_lines(spec, versions), *filter(None, map(lines.add, rows)), *footer_lines(spec, rows)]


def to_json(spec: SweepSpec, versions: dict, rows: list[Row]) -> dict:
    return {"backend": spec.backend, "world_size": spec.world_size, "dtype": spec.dtype,
            "rows": [row.to_dict() for row in rows], "avg_busbw": avg_busbw(rows), "versions": versions}


def _nccl_tests_measurement(row: Row | None) -> dict | None:
    if row is None:
        return None  # an operation without an in-place form
    return {"time": row.time_us, "alg_bw": row.algbw, "bus_bw": row.busbw,
            "nwrong": None if row.wrong is None else float(row.wrong)}


def _json_bool(value: bool) -> str:
    return "true" if value else "false"  # util.cu's jsonBool writes the strings, not JSON booleans


def nccl_version_code(version: str | None) -> int:
    """Return NCCL_VERSION_CODE for "2.21.5" (22105, the >= 2.9 encoding), 0 without NCCL."""
    if not version:
        return 0
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


def timestamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")  # util.cu's TIME_STRING_FORMAT, local time


def to_nccl_tests_json(spec: SweepSpec, versions: dict, rows: list[Row], args: list[str], start_time: str) -> dict:
    """Return the document nccl-tests writes with `-J file.json` (util.cu, JSON_FILE_VERSION 2).

    Its quirks are kept, as its readers expect them: "okay" and the flags are
    the strings "true"/"false", root is the table's padded string, nwrong a
    float or null. "env" stays empty: nccl-tests dumps the whole environment,
    which here would carry gpulse's secrets. "devices" is empty too: the
    ranks' processes are not known to the report.
    """
    inplace = {row.size: row for row in rows if row.inplace}
    results = [
        {"size": row.size, "count": row.count, "type": row.type, "redop": row.redop,
         "root": "%6i" % spec.collective.root, "out_of_place": _nccl_tests_measurement(row),
         "in_place": _nccl_tests_measurement(inplace.get(row.size)), "actual_iterations": spec.iters,
         "experiment_name": ""}
        for row in rows if not row.inplace and (row.size in inplace or not spec.collective.in_place)
    ]
    wrong = wrong_total(rows) or 0
    return {
        "version": NCCL_TESTS_JSON_VERSION, "start_time": start_time, "args": args, "env": [],
        "nccl_version": nccl_version_code(versions.get("nccl")),
        "config": {
            "nthreads": 1, "ngpus": 1, "minimum_bytes": spec.min_bytes, "maximum_bytes": spec.max_bytes,
            "step_factor": spec.factor, "warmup_iters": spec.warmup, "iterations": spec.iters,
            "aggregated_iterations": 1, "validation": int(spec.check), "graph": 0,
            "blocking_collectives": _json_bool(False), "per_iter_timing": _json_bool(False),
            "parallel_init": _json_bool(False), "devices": [],
        },
        "results": results,
        "out_of_bounds": {"count": wrong, "okay": _json_bool(wrong == 0)},
        "average_bus_bandwidth": {"bandwidth": avg_busbw(rows), "okay": "unchecked"},
        "errors": [],
        "end_time": timestamp(),
    }
