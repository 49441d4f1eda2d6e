"""A reader of nccl-tests output written apart from gpulse, to prove gpulse's
`manage.py allreduce` output is what existing nccl-tests tooling expects.

The table reader ports the logic of SuperBench's nccl-bw benchmark
(microsoft/superbenchmark, superbench/benchmarks/micro_benchmarks/
cuda_nccl_bw_performance.py, CudaNcclBwBenchmark._process_raw_result): keep
the lines between the last 'out-of-place' line and 'Out of bounds values',
take the column positions from the header line holding 'time' and 'busbw'
(counted from the end: out-of-place from the first occurrence, in-place from
the last), and read every line whose first field is a number. It is extended
only to the '#wrong' column, found the same way. The average is read as
FlagPerf's scripts do (FlagOpen/FlagPerf, base/toolkits/
interconnect-MPI_intraserver/*/main.sh): `grep "# Avg bus bandwidth" | awk
'{print $NF}'`. The JSON reader follows the field names of nccl-tests' own
writer (NVIDIA/nccl-tests, src/util.cu: writeBenchmarkLineBody,
writeResultFooter).
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    time: float
    algbw: float
    busbw: float
    wrong: float | None  # None: "N/A", the check was off


@dataclass(frozen=True)
class Result:
    size: int
    out_of_place: Measurement
    in_place: Measurement


@dataclass(frozen=True)
class Report:
    results: list[Result]
    avg_busbw: float


def _wrong(text: str) -> float | None:
    return None if text == "N/A" else float(text)


def _measured(fields: list[str], columns: dict[str, tuple[int, int]], which: int) -> Measurement:
    """Return one measurement of a row: which is 0 for out-of-place, 1 for in-place."""
    return Measurement(time=float(fields[columns["time"][which]]), algbw=float(fields[columns["algbw"][which]]),
                       busbw=float(fields[columns["busbw"][which]]), wrong=_wrong(fields[columns["#wrong"][which]]))


def parse_table(raw_output: str) -> Report:
    content = raw_output.splitlines()
    out_of_place_index = -1
    out_of_bound_index = -1
    for index, line in enumerate(content):
        if "out-of-place" in line:
            out_of_place_index = index
        if "Out of bounds values" in line:
            out_of_bound_index = index
    if out_of_place_index == -1 or out_of_bound_index == -1:
        raise ValueError("not nccl-tests output: no 'out-of-place' header or no 'Out of bounds values' line")
    table = content[out_of_place_index + 1:out_of_bound_index]

    columns: dict[str, tuple[int, int]] = {}
    size_index = -1
    for line in table:
        if "time" in line and "busbw" in line:
            header = re.sub(r" +", " ", line[1:].strip(" ")).split(" ")
            size_index = header.index("size")
            for name in ("time", "algbw", "busbw", "#wrong"):
                # Counted from the end: a column before them (redop) can be empty.
                out_of_place = header.index(name) - len(header)
                in_place = -1 - list(reversed(header)).index(name)
                columns[name] = (out_of_place, in_place)
            break
    if size_index == -1:
        raise ValueError("not nccl-tests output: no column header with 'time' and 'busbw'")

    results = []
    for line in table:
        fields = re.sub(r" +", " ", line.strip(" ")).split(" ")
        if len(fields) == 0 or not re.match(r"\d+", fields[0]):
            continue
        results.append(Result(size=int(fields[size_index]), out_of_place=_measured(fields, columns, 0),
                              in_place=_measured(fields, columns, 1)))

    avg = [line.split()[-1] for line in content if "# Avg bus bandwidth" in line]
    if not avg:
        raise ValueError("not nccl-tests output: no '# Avg bus bandwidth' line")
    return Report(results=results, avg_busbw=float(avg[-1]))


def _json_measurement(record: dict) -> Measurement:
    return Measurement(time=float(record["time"]), algbw=float(record["alg_bw"]), busbw=float(record["bus_bw"]),
                       wrong=None if record["nwrong"] is None else float(record["nwrong"]))


def parse_json(document: dict) -> Report:
    results = [Result(size=int(record["size"]), out_of_place=_json_measurement(record["out_of_place"]),
                      in_place=_json_measurement(record["in_place"]))
               for record in document["results"]]
    return Report(results=results, avg_busbw=float(document["average_bus_bandwidth"]["bandwidth"]))
