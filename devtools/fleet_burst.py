"""The command line and the input of the benches that time one burst of a simulated fleet's samples
(bench_parse, bench_frames): the same options, the same fleet and seed, so their figures compare."""

import argparse

from collectors.simulated import SimulatedFleet


def burst_arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def one_burst(nodes: int, gpus_per_node: int) -> list[dict]:
    """Every node's sample of one tick (seed 1)."""
    fleet = SimulatedFleet(nodes, gpus_per_node, interval=1.0, seed=1)
    samples = fleet.sample()
    fleet.close()
    return samples
