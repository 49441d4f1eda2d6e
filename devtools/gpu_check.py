"""gpulse against a real GPU: what the fake libnvidia-ml in tests/ cannot show.

    python -m devtools.gpu_check [--load-seconds 20] [--json FILE]

Run it on a node with an NVIDIA driver and the CUDA build of torch. It
needs only the node's packages (requirements-node.txt), not Django.

1. The nvml source's sample next to ``nvidia-smi --query-gpu`` taken at the
   same instant, with the GPUs idle and under a bf16 matrix-product load
   (and the load's process in ``--query-compute-apps``): each field side by
   side, and whether they agree within what the two reads' timing allows.
2. The health checks on those real readings: a healthy GPU should pass.
3. What one ``sample()`` costs on real NVML: wall time and this process's CPU,
   and each NVML entry point's share of it.
4. The all-reduce sweep on NCCL (one rank per GPU) in nccl-tests' format,
   its correctness check, and the checker's own diagnostic (a corrupted
   rank must be caught); the same sweep on gloo to compare.

It prints a report and, with --json, writes every reading it compared.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pynvml

from collectors.arguments import positive_float
from collectors.health_checks import HealthChecks
from collectors.nvml import NvmlSource
from gpulse.sweep_spec import SweepSpec
from gpulse.throttle import throttle_reasons
from workers.launcher import run_node
from workers.report import table_lines, wrong_total

MIB = 1 << 20


@dataclass(frozen=True)
class Field:
    """One nvidia-smi query field, the sample key it should equal, and the difference allowed."""

    query: str
    key: str
    convert: Callable[[str], object]
    tolerance: float = 0.0  # absolute, for numbers; texts and flags must be equal


def _absent(text: str) -> bool:
    """nvidia-smi's cell for a reading it does not have: "[N/A]", "[Not Supported]", "N/A" or empty."""
    return text.startswith("[") or text in ("N/A", "")


def _number(text: str) -> float | None:
    return None if _absent(text) else float(text)


def _flag(text: str) -> bool | None:
    return {"Enabled": True, "Disabled": False}.get(text)


def _text(text: str) -> str | None:
    return None if _absent(text) else text


def _reasons(text: str) -> list[str] | None:
    return None if _absent(text) else throttle_reasons(int(text, 16))


# Utilization, power and the SM clock move from one 1/6 s window to the next
# even under a steady load, and the two reads are some ms apart: they get a
# margin; what does not move between two reads must be equal.
FIELDS = [
    Field("uuid", "uuid", _text),
    Field("name", "name", _text),
    Field("utilization.gpu", "util", _number, 10),
    Field("utilization.memory", "mem_util", _number, 15),
    Field("memory.used", "mem_used", _number, 64),
    Field("memory.total", "mem_total", _number),
    Field("temperature.gpu", "temp", _number, 2),
    Field("temperature.memory", "mem_temp", _number, 2),
    # NVML's power usage is a 1 s average on Ampere and newer: which of nvidia-smi's does it match?
    Field("power.draw", "power", _number, 40),
    Field("power.draw.average", "power", _number, 40),
    Field("power.draw.instant", "power", _number, 40),
    Field("enforced.power.limit", "power_limit", _number, 0.5),
    Field("clocks.sm", "sm_clock", _number, 100),
    Field("clocks.mem", "mem_clock", _number),
    Field("fan.speed", "fan", _number, 2),
    Field("clocks_event_reasons.active", "throttle", _reasons),
    Field("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected", _number),
    Field("ecc.mode.current", "ecc_enabled", _flag),
    Field("pcie.link.gen.current", "pcie_gen", _number),
    Field("pcie.link.gen.max", "pcie_gen_max", _number),
    Field("pcie.link.width.current", "pcie_width", _number),
    Field("pcie.link.width.max", "pcie_width_max", _number),
    Field("persistence_mode", "persistence", _flag),
    Field("compute_mode", "compute_mode", _text),
    Field("mig.mode.current", "mig_enabled", _flag),
    Field("vbios_version", "vbios", _text),
]


def ours(gpu: dict, field: Field):
    """The sample's value in nvidia-smi's unit (MiB for memory)."""
    value = gpu.get(field.key)
    if field.key in ("mem_used", "mem_total") and value is not None:
        return value / MIB
    return value


def agrees(field: Field, smi, mine) -> bool:
    if smi is None or mine is None:
        return smi is None and mine is None
    if isinstance(smi, float):
        return abs(smi - mine) <= field.tolerance
    return smi == mine


def known_fields() -> list[Field]:
    """The fields this driver's nvidia-smi answers: one unknown field fails the whole query."""
    try:
        query_smi(FIELDS)
        return FIELDS
    except subprocess.CalledProcessError:
        pass
    fields = []
    for field in FIELDS:
        try:
            query_smi([field])
            fields.append(field)
        except subprocess.CalledProcessError as exc:
            print(f"nvidia-smi refuses {field.query} ({exc.stdout.strip()}): not compared")
    return fields


def _smi_rows(query: str) -> list[list[str]]:
    """The cells of ``nvidia-smi <query> --format=csv,noheader,nounits``, a list per line."""
    out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]


def query_smi(fields: list[Field]) -> list[dict]:
    """nvidia-smi --query-gpu for the fields, one dict per GPU."""
    names = [field.query for field in fields]
    return [dict(zip(names, row, strict=True)) for row in _smi_rows(f"--query-gpu={','.join(names)}")]


def query_apps() -> list[dict]:
    return [{"uuid": uuid, "pid": int(pid), "used_mib": _number(used)}
            for uuid, pid, used in _smi_rows("--query-compute-apps=gpu_uuid,pid,used_memory")]


def side_by_side(source: NvmlSource, fields: list[Field]) -> dict:
    """One sample and one nvidia-smi query, started together; every field of every GPU compared."""
    started = time.time()
    with ThreadPoolExecutor(1) as pool:
        smi = pool.submit(lambda: (query_smi(fields), query_apps()))
        sample = source.sample()[0]
        rows, apps = smi.result()
    compared = []
    for gpu, row in zip(sample["gpus"], rows, strict=True):
        for field in fields:
            theirs, mine = field.convert(row[field.query]), ours(gpu, field)
            compared.append({"gpu": gpu["index"], "field": field.query, "nvidia_smi": theirs, "gpulse": mine,
                             "agree": agrees(field, theirs, mine)})
    processes = [{"uuid": gpu["uuid"], "pid": p["pid"], "used_mib": None if p["mem_used"] is None
                  else p["mem_used"] / MIB} for gpu in sample["gpus"] for p in gpu["processes"] or []]
    return {"seconds": round(time.time() - started, 3), "sample": sample, "fields": compared,
            "processes": {"nvidia_smi": apps, "gpulse": processes}}


LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ballast = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")  # 8 GiB that memory.used must show
print("loaded", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
"""


def compare(source: NvmlSource, load_seconds: float) -> list[dict]:
    fields = known_fields()
    rounds = [{"state": "idle", **side_by_side(source, fields)} for _ in range(2)]
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(load_seconds)], stdout=subprocess.PIPE, text=True)
    try:
        if load.stdout is None or load.stdout.readline().strip() != "loaded":
            raise RuntimeError("the matrix-product load did not start")
        time.sleep(min(8.0, load_seconds / 3))  # clocks and power settle
        deadline = time.monotonic() + load_seconds / 3
        while time.monotonic() < deadline:
            rounds.append({"state": "load", "load_pid": load.pid, **side_by_side(source, fields)})
            time.sleep(1)
    finally:
        load.terminate()
        load.wait()
    return rounds


def print_comparison(rounds: list[dict]) -> None:
    print("\n## nvml source vs nvidia-smi --query-gpu (same instant)")
    for state in ("idle", "load"):
        mine = [r for r in rounds if r["state"] == state]
        if not mine:
            continue
        print(f"\n{state}: {len(mine)} rounds; last round's values, and the rounds that agreed")
        print(f"{'field':46} {'nvidia-smi':>24} {'gpulse':>24}  agreed")
        for index, last in enumerate(mine[-1]["fields"]):
            agreed = sum(r["fields"][index]["agree"] for r in mine)
            label = f"{last['field']} (GPU {last['gpu']})"
            print(f"{label:46} {str(last['nvidia_smi']):>24.24} {_short(last['gpulse']):>24.24}  {agreed}/{len(mine)}")
        apps = mine[-1]["processes"]
        print(f"processes: nvidia-smi {apps['nvidia_smi']}\n           gpulse     {apps['gpulse']}")


def _short(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def health(rounds: list[dict]) -> dict:
    """The health checks over the rounds' samples, in order, as the collector runs them."""
    checks = HealthChecks()
    for round_ in rounds:
        sample = round_["sample"]
        checks.annotate(sample, sample["ts"])
    return {r["state"]: r["sample"]["health"]["findings"] for r in rounds}


def sample_cost(source: NvmlSource, count: int) -> dict:
    walls, cpus = [], []
    for _ in range(count):
        wall, cpu = time.perf_counter(), time.process_time()
        source.sample()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    walls.sort()
    cpus.sort()
    return {"samples": count, "wall_ms_median": 1e3 * walls[count // 2], "wall_ms_max": 1e3 * walls[-1],
            "cpu_ms_median": 1e3 * cpus[count // 2], "cpu_ms_max": 1e3 * cpus[-1]}


def call_costs(reads: int) -> list[dict]:
    """Each NVML entry point the source calls: calls, CPU of the calling thread and wall time, per sample.

    The binding's functions are wrapped before the source starts, so the
    references it keeps (the clock-reasons call) are wrapped too. A call the
    binding makes inside another (a _v3 behind the plain name) counts in the
    outer one only.
    """
    totals: dict[str, list[float]] = {}
    depth = threading.local()
    originals = {name: getattr(pynvml, name) for name in dir(pynvml)
                 if name.startswith(("nvmlDevice", "nvmlEventSet", "nvmlSystem")) and callable(getattr(pynvml, name))}

    def timed(name, call):
        def run(*args, **kwargs):
            outer = not getattr(depth, "inside", False)
            depth.inside = True
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                if outer:
                    depth.inside = False
                    total = totals.setdefault(name, [0, 0.0, 0.0])
                    total[0] += 1
                    total[1] += time.thread_time() - cpu
                    total[2] += time.perf_counter() - wall
        return run

    for name, call in originals.items():
        setattr(pynvml, name, timed(name, call))
    try:
        source = NvmlSource("gpu-check", interval=1.0)
        try:
            source.sample()  # the first read prepares each GPU: not a steady sample's cost
            totals.clear()
            for _ in range(reads):
                source.sample()
            measured = dict(totals)
        finally:
            source.close()
    finally:
        for name, call in originals.items():
            setattr(pynvml, name, call)
    rows = [{"call": name, "calls": count / reads, "cpu_ms": 1e3 * cpu / reads, "wall_ms": 1e3 * wall / reads}
            for name, (count, cpu, wall) in measured.items()]
    return sorted(rows, key=lambda row: -row["cpu_ms"])


def print_call_costs(rows: list[dict]) -> None:
    print("\n## NVML calls per sample, costliest first (CPU of the reading thread)")
    print(f"{'call':52} {'calls':>6} {'cpu ms':>8} {'wall ms':>8}")
    for row in rows:
        print(f"{row['call']:52} {row['calls']:6.1f} {row['cpu_ms']:8.3f} {row['wall_ms']:8.3f}")
    print(f"{'all':52} {sum(r['calls'] for r in rows):6.1f} {sum(r['cpu_ms'] for r in rows):8.3f} "
          f"{sum(r['wall_ms'] for r in rows):8.3f}")


def sweep(spec: SweepSpec) -> dict:
    result = run_node(spec)
    # A job that failed before its first size has no resolved spec to head a report.
    lines = table_lines(result.spec, result.versions, result.rows) if result.rows else []
    return {"status": result.status, "reason": result.reason, "duration_s": round(result.duration_s, 2),
            "wrong": wrong_total(result.rows), "report": lines,
            "rows": [row.to_dict() for row in result.rows]}


def sweeps() -> dict:
    gib = 1 << 30
    runs = {
        "nccl float32": SweepSpec(backend="nccl", min_bytes=8, max_bytes=gib),
        "nccl bfloat16": SweepSpec(backend="nccl", dtype="bfloat16", min_bytes=8, max_bytes=gib),
        "nccl, rank 0 corrupted": SweepSpec(backend="nccl", min_bytes=1 << 20, max_bytes=64 << 20, corrupt_rank=0),
        "gloo float32, 2 ranks": SweepSpec(backend="gloo", ranks_per_node=2, min_bytes=8, max_bytes=64 << 20),
    }
    results = {}
    for name, spec in runs.items():
        results[name] = result = sweep(spec)
        print(f"\n## all-reduce: {name}: {result['status']}, #wrong {result['wrong']}, {result['duration_s']} s"
              + (f" ({result['reason']})" if result["reason"] else ""))
        print("\n".join(result["report"]))
    return results


def check_nvml(load_seconds: float) -> dict:
    report: dict = {}
    source = NvmlSource("gpu-check", interval=1.0)
    try:
        print(f"driver {source.system['driver']}, CUDA {source.system['cuda']}")
        report["comparison"] = rounds = compare(source, load_seconds)
        print_comparison(rounds)
        disagreements = sum(not f["agree"] for r in rounds for f in r["fields"])
        print(f"\nfields that disagreed, all rounds: {disagreements}")
        report["health"] = findings = health(rounds)
        print(f"\n## health findings: {json.dumps(findings, indent=1)}")
        report["sample_cost"] = cost = sample_cost(source, 20)
        print(f"\n## one sample() on real NVML: {json.dumps(cost)}")
    finally:
        source.close()
    report["call_costs"] = costs = call_costs(20)
    print_call_costs(costs)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=positive_float, default=20.0)
    parser.add_argument("--json", help="write every reading compared to this file")
    args = parser.parse_args(argv)
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi is not on the PATH: run this on a node with the NVIDIA driver", file=sys.stderr)
        return 2
    print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
    report: dict = {"host": os.uname().nodename}
    failed = []
    # One section's failure is reported and the next still runs: a GPU node's time is scarce.
    for name, section in (("nvml", lambda: check_nvml(args.load_seconds)), ("sweeps", sweeps)):
        try:
            report[name] = section()
        except Exception:
            failed.append(name)
            report[name] = {"error": traceback.format_exc()}
            print(f"\n## {name} failed\n{report[name]['error']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
