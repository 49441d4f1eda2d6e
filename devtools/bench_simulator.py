"""Cost of the simulated source: one sample() of a whole fleet, before the MIG node and now, without and with one.

"before" is collectors/simulated.py as of commit BEFORE (the last one without
the MIG node), loaded from git, so the comparison needs no copy of old code;
"now" is the working tree's, and "now + MIG" the same with the fleet's last
node in MIG mode (34 instances). Each fleet is sampled in turn, round by round
(so a busy machine slows them alike), and the median and best of --repeat
rounds are reported, in milliseconds per sample() of the fleet.

    .venv/bin/python -m devtools.bench_simulator [--nodes 1000] [--gpus-per-node 8] [--repeat 30] [--json]
"""

import argparse
import json
import statistics
import subprocess
import time
import types
from pathlib import Path

from collectors import simulated

ROOT = Path(__file__).resolve().parent.parent

BEFORE = "69e6027"  # the last commit before the simulated MIG node


def simulated_before() -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{BEFORE}:collectors/simulated.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("simulated_before")
    exec(compile(source, f"{BEFORE}:collectors/simulated.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    shape = (args.nodes, args.gpus_per_node, 1.0)
    last = simulated.SimulatedFleet(*shape, seed=1).node_names[-1]
    fleets = {
        "before": simulated_before().SimulatedFleet(*shape, seed=1),
        "now": simulated.SimulatedFleet(*shape, seed=1),
        "now + MIG": simulated.SimulatedFleet(*shape, seed=1, mig_node=last),
    }
    timings: dict[str, list[float]] = {name: [] for name in fleets}
    for fleet in fleets.values():
        fleet.sample()  # the first sample builds the constant dicts
    for _ in range(args.repeat):
        for name, fleet in fleets.items():
            started = time.perf_counter()
            fleet.sample()
            timings[name].append((time.perf_counter() - started) * 1000)
    figures = {name: {"median_ms": round(statistics.median(times), 2), "best_ms": round(min(times), 2)}
               for name, times in timings.items()}
    if args.json:
        print(json.dumps({"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "repeat": args.repeat,
                          "sample_ms": figures}))
        return
    print(f"sample() of {args.nodes} nodes x {args.gpus_per_node} GPUs, {args.repeat} rounds:")
    for name, figure in figures.items():
        print(f"  {name:10s} median {figure['median_ms']:7.2f} ms   best {figure['best_ms']:7.2f} ms")


if __name__ == "__main__":
    main()
