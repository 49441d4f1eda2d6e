"""`python -m workers.healthcheck --quick`: this node's health, judged once, as an exit code.

For Slurm's HealthCheckProgram and prolog, NHC, and Kubernetes node checks. It
reads every GPU once through the collector's own NVML source, runs the
collector's own health checks on that sample (collectors/health_checks.py, the
catalogue of gpulse/health.py), then the per-GPU checks (workers/gpu_checks.py)
on each GPU no process is using. It runs in the node install: no Django, no Redis.

stdout gets one line per problem, "gpu 0 pcie_link fail: x8 of x16 lanes, …"
("node …" for a node check), so a prolog can drain the node with that line as
its reason; a summary goes to stderr.
"""

import argparse
import dataclasses
import json
import socket
import sys
import time
from pathlib import Path

from collectors.arguments import folder, positive_int
from collectors.gpu_test_record import write_record
from collectors.health_checks import HealthChecks
from collectors.sources import SourceUnavailable
from gpulse.health import FAIL, PASS, UNKNOWN, WARN

HEALTHY, UNHEALTHY, NOT_CHECKED = 0, 1, 2
# Quick mode starts no GPU's checks after this many seconds, so the whole run stays under 30 s.
QUICK_BUDGET = 20.0
NVML_READ = "nvml_read"  # a GPU NVML could not read (a hung or failed call): this command's own check

EXIT_CODES = f"""exit status:
  {HEALTHY}  healthy: no check failed (and with --strict, none warned)
  {UNHEALTHY}  unhealthy: stdout has one line per failure, "gpu 0 pcie_link fail: ..."
  {NOT_CHECKED}  could not check: no NVIDIA driver or NVML (stdout says why in one line), or a bad option
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.healthcheck",
        description="Check this node's GPUs once: the collector's health checks on one NVML reading,\n"
        "then a device-memory, PCIe and bf16 matmul test of each GPU no process uses.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short per-GPU tests, the whole run under 30 s (Slurm HealthCheckProgram, prolog); "
        "without it each GPU test runs 25 times as many iterations (seconds per GPU)",
    )
    parser.add_argument(
        "--expected-gpus",
        type=positive_int,
        metavar="N",
        help="GPUs the node should have: fewer fails gpu_count (default: the GPUs NVML lists)",
    )
    parser.add_argument(
        "--sysfs",
        type=folder,
        metavar="PATH",
        default=Path("/sys"),
        help="where sysfs is mounted, for the InfiniBand/RoCE ports (default %(default)s)",
    )
    parser.add_argument(
        "--skip-gpu-tests",
        action="store_true",
        help="run only the health checks of the NVML reading (no CUDA, a second or two)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        metavar="PATH",
        help="write the per-GPU test results to PATH (replaced whole, readable by all) for the collector's "
        "--gpu-test-record, so the dashboard shows a failed GPU test until a later run passes",
    )
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="read no GPU: run only the CPU counterparts of the per-GPU tests (a copy's bandwidth, an fp32 "
        "matmul), measured and not judged; what a GPU check of a simulated node runs",
    )
    parser.add_argument("--strict", action="store_true", help="a warning fails too (exit 1)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (node, exit, checked, findings, tests) instead of lines",
    )
    return parser


def line(finding: dict) -> str:
    where = "node" if finding["gpu"] is None else f"gpu {finding['gpu']}"
    return f"{where} {finding['check']} {finding['status']}: {finding['reason']}"


def read_node(args: argparse.Namespace) -> dict:
    """One sample of this node through the collector's NVML source, with its "health"; raise SourceUnavailable."""
    try:
        from collectors.nvml import MAX_READ_TIMEOUT, NvmlSource
    except ImportError as exc:  # nvidia-ml-py absent: the node install is incomplete
        raise SourceUnavailable(f"NVML: cannot import the binding ({exc})") from None
    source = NvmlSource(socket.gethostname(), interval=1.0, read_timeout=MAX_READ_TIMEOUT, sysfs=args.sysfs)
    try:
        [sample] = source.sample()
    finally:
        source.close()
    HealthChecks(args.expected_gpus).annotate(sample, time.time())
    return sample


def unread_gpus(sample: dict) -> list[dict]:
    """A fail for each GPU whose NVML read failed or hung: the health checks see only its nulls (unknown)."""
    return [
        {"check": NVML_READ, "gpu": gpu["index"], "status": FAIL, "reason": gpu["error"]}
        for gpu in sample["gpus"]
        if gpu.get("error")
    ]


def gpu_tests(sample: dict, quick: bool, deadline: float) -> list[dict]:
    """The per-GPU checks (workers.gpu_checks' results, as dicts) of every GPU that answered and no process uses."""
    try:
        from workers import gpu_checks
    except ImportError as exc:  # torch absent: the node install is incomplete
        return [
            {
                "name": "gpu_tests",
                "gpu": None,
                "value": None,
                "unit": "",
                "verdict": UNKNOWN,
                "reason": f"not run: torch cannot be imported ({exc})",
            }
        ]
    missing = gpu_checks.cuda_missing()
    if missing is not None:
        return [dataclasses.asdict(result) for result in gpu_checks.not_run(None, missing)]
    effort = gpu_checks.QUICK if quick else gpu_checks.FULL
    ordinals = gpu_checks.cuda_ordinals()
    results: list = []
    for gpu in sample["gpus"]:
        if gpu.get("lost") or gpu.get("error"):
            continue  # gpu_count or nvml_read fails it already
        ordinal = ordinals.get((gpu["uuid"] or "").lower())
        if ordinal is None:
            results += gpu_checks.not_run(gpu["index"], "CUDA does not see it (CUDA_VISIBLE_DEVICES, or MIG mode)")
            continue
        skip = not_tested(gpu, quick and time.monotonic() > deadline)
        if skip is not None:
            results += gpu_checks.not_run(gpu["index"], skip)
            continue
        link = None
        if gpu.get("pcie_gen_max") and gpu.get("pcie_width_max"):
            link = gpu_checks.Link(int(gpu["pcie_gen_max"]), int(gpu["pcie_width_max"]))
        results += gpu_checks.check_gpu(ordinal, gpu["index"], link, effort)
    return [dataclasses.asdict(result) for result in results]


def not_tested(gpu: dict, out_of_time: bool) -> str | None:
    """Why the per-GPU checks leave this GPU (a sample's) alone, or None to test it."""
    if gpu.get("processes"):
        # A job's GPU: testing it would slow the job down and measure the job, not the GPU.
        count = len(gpu["processes"])
        return f"in use by {count} process{'es' if count > 1 else ''}"
    if out_of_time:
        return f"quick mode's {QUICK_BUDGET:g} s were spent"
    return None


def cpu_counterparts(quick: bool) -> list[dict]:
    """The per-GPU tests' CPU counterparts (workers.gpu_checks.check_cpu), as dicts: verdict unknown."""
    from workers import gpu_checks

    return [dataclasses.asdict(result) for result in gpu_checks.check_cpu(gpu_checks.QUICK if quick else
                                                                            gpu_checks.FULL)]


def check(args: argparse.Namespace) -> tuple[int, dict]:
    """Return the exit status and the report; raise SourceUnavailable when NVML cannot be read."""
    started = time.monotonic()
    sample: dict
    if args.cpu_only:
        sample = {"node": socket.gethostname(), "gpus": [], "health": {"findings": [], "checked": []}}
    else:
        sample = read_node(args)
    findings = sample["health"]["findings"] + unread_gpus(sample)
    if args.cpu_only:
        tests = cpu_counterparts(args.quick)
    else:
        tests = [] if args.skip_gpu_tests else gpu_tests(sample, args.quick, started + QUICK_BUDGET)
    findings += [
        {"check": test["name"], "gpu": test["gpu"], "status": test["verdict"], "reason": test["reason"]}
        for test in tests
        if test["verdict"] != PASS
    ]
    if args.record is not None and not args.skip_gpu_tests and not args.cpu_only:
        try:
            write_record(args.record, tests)
        except OSError as exc:  # the node's verdict still stands: only the dashboard misses it
            print(f"gpulse healthcheck: could not write the record {args.record}: {exc}", file=sys.stderr)
    failing = {FAIL, WARN} if args.strict else {FAIL}
    status = UNHEALTHY if any(finding["status"] in failing for finding in findings) else HEALTHY
    report = {
        "node": sample["node"],
        "exit": status,
        "gpus": len(sample["gpus"]),
        "checked": sample["health"]["checked"],
        "findings": findings,
        "tests": tests,
        "seconds": round(time.monotonic() - started, 1),
    }
    return status, report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status, report = check(args)
    except SourceUnavailable as exc:
        print(f"gpulse healthcheck could not check: {exc}")
        return NOT_CHECKED
    except Exception as exc:  # a bug of ours must not read as an unhealthy node (exit 1) and drain it
        print(f"gpulse healthcheck could not check: {type(exc).__name__}: {exc}")
        return NOT_CHECKED
    if args.json:
        print(json.dumps(report))
        return status
    for finding in report["findings"]:
        if finding["status"] in (FAIL, WARN):
            print(line(finding))
    counts = {word: sum(finding["status"] == word for finding in report["findings"]) for word in (FAIL, WARN, UNKNOWN)}
    print(
        f"gpulse healthcheck: {report['node']}, {report['gpus']} GPUs: {counts[FAIL]} fail, {counts[WARN]} warn, "
        f"{counts[UNKNOWN]} unknown in {report['seconds']} s",
        file=sys.stderr,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
