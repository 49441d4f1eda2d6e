"""Cost of judging node health in ingest: one tick of a 1,000-node fleet whose samples carry health.

Each tick takes every node's sample (NodeHealthBook.update, as ingest's apply()
does) and judges the cluster (tick(), version skew included) with its frames'
health entries and the hash records of the nodes that changed. One node in 50
has a failing NVLink finding and one in 100 another driver. The first tick
judges every node; later ticks only what changed, which is the steady state.
Printed in ms of CPU per tick (median of --ticks), so 10 ms is 1 % of a core at 1 Hz.

    .venv/bin/python -m devtools.bench_node_health [--nodes 1000] [--gpus-per-node 8] [--ticks 60] [--json]
"""

import argparse
import json
import os
import statistics
import time
from types import SimpleNamespace

import django


def fleet(nodes: int, gpus: int) -> dict[str, dict]:
    from gpulse.health import CHECKS, CLUSTER

    checked = [check.id for check in CHECKS if check.scope != CLUSTER]  # what a collector runs
    samples = {}
    for i in range(nodes):
        name = f"node-{i:04d}"
        findings = [{"check": "nvlink_state", "gpu": 3, "status": "fail", "reason": "link 2 down, 17 up"}]
        samples[name] = {
            "v": 1, "node": name, "ts": 0.0, "interval": 1.0,
            "gpus": [{"index": g, "name": "NVIDIA H100 80GB HBM3"} for g in range(gpus)],
            "system": {"driver": "535.104.05" if i % 100 == 0 else "550.54.15", "cuda": "12.4"},
            "health": {"checked": checked, "findings": findings if i % 50 == 0 else []},
        }
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    from dashboard.health.node_health import NodeHealthBook

    samples = fleet(args.nodes, args.gpus_per_node)
    cluster = {name: SimpleNamespace(status="up") for name in samples}
    book = NodeHealthBook()
    times = []
    for tick in range(args.ticks):
        start = time.process_time()
        for name, sample in samples.items():
            book.update(name, sample)
        changed = book.tick(float(tick), cluster, [])
        for node in book.nodes.values():
            node.frame_entry()
        for name in changed:
            json.dumps(book.nodes[name].record())
        book.take_changes()
        times.append((time.process_time() - start) * 1000)
    result = {"nodes": args.nodes, "first_tick_ms": round(times[0], 2),
              "tick_ms_median": round(statistics.median(times[1:]), 2), "tick_ms_max": round(max(times[1:]), 2)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.nodes} nodes: first tick {result['first_tick_ms']} ms, then {result['tick_ms_median']} ms "
              f"a tick (median; max {result['tick_ms_max']} ms) of CPU")


if __name__ == "__main__":
    main()
