"""Present a sweep like nccl-tests' all_reduce_perf: a '#' header, one line per
size (out-of-place, then in-place), the closing summary; or as JSON."""

from __future__ import annotations

from workers.sweep_spec import Row, SweepSpec

_HEAD = "# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s" * 2
_LINE = "%12d  %12d  %8s  %6s  %6d"
_LABELS = "# %10s  %12s  %8s  %6s  %6s" % ("", "", "", "", "")
_BLOCK = len("  %7s  %6s  %6s  %6s" % ("", "", "", ""))
ALLREDUCE_ROOT = -1  # all_reduce has no root; nccl-tests prints -1


def avg_busbw(rows: list[Row]) -> float:
    """Return the mean busbw over every measurement, in-place ones included (as nccl-tests)."""
    return sum(row.busbw for row in rows) / len(rows) if rows else 0.0


def wrong_total(rows: list[Row]) -> int | None:
    """Return the wrong elements over all rows, or None when nothing was checked."""
    checked = [row.wrong for row in rows if row.wrong is not None]
    return sum(checked) if checked else None


def header_lines(spec: SweepSpec, versions: dict) -> list[str]:
    world = spec.world_size
    lines = [
        f"# gpulse {spec.op}: backend {spec.backend}  ranks {world} ({spec.nnodes} node(s) x {spec.ranks_per_node})",
        f"# minBytes {spec.min_bytes} maxBytes {spec.max_bytes} step: {spec.factor}(factor)"
        f" warmup iters: {spec.warmup} iters: {spec.iters} validation: {int(spec.check)}",
        "# " + "  ".join(f"{name} {value or '-'}" for name, value in versions.items()),
        "# out-of-place: a copy into the output, then the in-place all-reduce (torch.distributed has no other)",
    ]
    if world == 1:
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


def _time(time_us: float) -> str:
    # nccl-tests' widths: fewer decimals as the time grows, to stay in 7 columns.
    if time_us >= 10000:
        return "%7.0f" % time_us
    if time_us >= 100:
        return "%7.1f" % time_us
    return "%7.2f" % time_us


def _measurement(row: Row) -> str:
    wrong = "N/A" if row.wrong is None else str(row.wrong)
    return "  %7s  %6.2f  %6.2f  %6s" % (_time(row.time_us), row.algbw, row.busbw, wrong)


def row_line(outplace: Row, inplace: Row) -> str:
    return (_LINE % (outplace.size, outplace.count, outplace.type, outplace.redop, ALLREDUCE_ROOT)
            + _measurement(outplace) + _measurement(inplace))


def footer_lines(rows: list[Row]) -> list[str]:
    wrong = wrong_total(rows)
    verdict = "N/A (check off)" if wrong is None else f"{wrong} {'FAILED' if wrong else 'OK'}"
    return [f"# Out of bounds values : {verdict}", f"# Avg bus bandwidth    : {avg_busbw(rows):g}"]


def to_json(spec: SweepSpec, versions: dict, rows: list[Row]) -> dict:
    return {"backend": spec.backend, "world_size": spec.world_size, "dtype": spec.dtype,
            "rows": [row.to_dict() for row in rows], "avg_busbw": avg_busbw(rows), "versions": versions}
