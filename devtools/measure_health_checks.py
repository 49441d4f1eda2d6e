"""CPU of the collector's health checks: HealthChecks.annotate() on simulated samples.

Two shapes: one node of 8 GPUs at 1 Hz (what a node's collector adds; the
target is under 1 % of a core), and 1,000 nodes of 8 GPUs per call (what the
simulated fleet's collector adds every second). Each is measured healthy and
with every GPU failing several checks (reasons are built only for findings, so
that is the costly case). CPU is process time around annotate() alone, the
samples being made beforehand by the simulated fleet. docs/PERFORMANCE.md has
the numbers.

    .venv/bin/python -m devtools.measure_health_checks [--seconds 60] [--json]
"""

import argparse
import gc
import json
import sys
import time

from collectors.arguments import positive_int
from collectors.health_checks import HealthChecks
from collectors.simulated import SimulatedFleet

BROKEN = {"pcie_width": 8, "ecc_uncorrected": 1, "nvlink_links_up": 17, "remap_pending": True, "persistence": False}


def samples_of(nodes: int, seconds: int, broken: bool) -> list[list[dict]]:
    """``seconds`` consecutive samplings of a fleet of ``nodes`` nodes × 8 GPUs."""
    clock = [1_800_000_000.0]
    fleet = SimulatedFleet(nodes, 8, 1.0, seed=1, clock=lambda: clock[0])
    rounds = []
    for _ in range(seconds):
        clock[0] += 1.0
        samples = fleet.sample()
        if broken:
            for sample in samples:
                for gpu in sample["gpus"]:
                    gpu.update(BROKEN)
        rounds.append(samples)
    return rounds


def measure(nodes: int, seconds: int, broken: bool) -> dict:
    rounds = samples_of(nodes, seconds, broken)
    # The prepared samples would make the garbage collector's scans longer than a
    # collector's, which holds one sampling at a time.
    gc.freeze()
    checks = HealthChecks()
    now = 1_800_000_000.0
    started = time.process_time()
    for step, samples in enumerate(rounds):
        for sample in samples:
            checks.annotate(sample, now + step)
    cpu = time.process_time() - started
    gc.unfreeze()
    findings = sum(len(sample["health"]["findings"]) for sample in rounds[-1])
    per_call = cpu / seconds
    return {"nodes": nodes, "gpus": nodes * 8, "broken": broken, "calls": seconds,
            "cpu_ms_per_call": round(1000 * per_call, 3), "core_percent_at_1hz": round(100 * per_call, 3),
            "findings_per_call": findings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=positive_int, default=60, help="samplings measured per shape")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [measure(nodes, args.seconds if nodes == 1 else max(3, args.seconds // 10), broken)
               for nodes in (1, 1000) for broken in (False, True)]
    if args.json:
        print(json.dumps(results))
        return 0
    for r in results:
        state = "every GPU failing" if r["broken"] else "healthy"
        print(f"{r['nodes']:>5} node(s) x 8 GPUs, {state:>17}: {r['cpu_ms_per_call']:8.3f} ms CPU per call = "
              f"{r['core_percent_at_1hz']:7.3f} % of a core at 1 Hz ({r['findings_per_call']} findings, "
              f"{r['calls']} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
