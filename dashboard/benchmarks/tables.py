"""The tables of the job and compare pages, computed here so the templates only print them."""

from dashboard.benchmarks.models import BenchmarkJob

VERSION_ORDER = ("torch", "nccl", "cuda", "driver", "python", "hostname")


def versions_table(job: BenchmarkJob) -> tuple[list[str], list[tuple[str, list]]]:
    """Return the software names (torch, nccl, driver, …) and one row of versions per node.

    Each node reports its own versions (result["versions"]: node -> name ->
    version or None); a name only some nodes report is blank for the others.
    """
    # Each node's report is the node's to write: one that is not an object is shown as it came.
    versions = {node: found if isinstance(found, dict) else {"reported": found}
                for node, found in ((job.result or {}).get("versions") or {}).items()}
    # PostgreSQL's jsonb keeps no key order: the usual stack first, then the rest by name, nodes by name.
    reported = {name for found in versions.values() for name in found}
    names = [name for name in VERSION_ORDER if name in reported] + sorted(reported - set(VERSION_ORDER))
    return names, [(node, [versions[node].get(name) for name in names]) for node in sorted(versions)]


def compare_rows(jobs: list[BenchmarkJob]) -> list[dict]:
    """Return one row per message size: each job's out-of-place busbw and algbw,
    and each later job's busbw difference from the first job's (GB/s and %).

    busbw is the figure that compares across rank counts (algbw × 2(n−1)/n),
    so it is the one differenced; a job that has no row at a size shows None.
    """
    measured = [{row["size"]: row for row in job.result["rows"] if not row["inplace"]} for job in jobs]
    rows = []
    for size in sorted({size for by_size in measured for size in by_size}):
        base = measured[0].get(size)
        cells: list[dict] = []
        for by_size in measured:
            row = by_size.get(size)
            delta = pct = None
            if row and base and cells:  # the first job is the baseline
                delta = row["busbw"] - base["busbw"]
                pct = delta / base["busbw"] * 100 if base["busbw"] else None  # one rank: busbw 0
            cells.append({"busbw": row and row["busbw"], "algbw": row and row["algbw"], "delta": delta, "pct": pct})
        rows.append({"size": size, "cells": cells})
    return rows
