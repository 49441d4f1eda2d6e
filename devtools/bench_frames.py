"""Cost of MIG instances in the browsers' frames: the snapshot's size for a fleet without MIG against the frame
builder before them, and what FrameBuilder.update() costs per GPU in MIG mode.

The fleet is the load test's (the simulated fleet, 1,000 nodes x 8 GPUs by default). "before" is
dashboard/live/frames.py as of commit BEFORE (the last without MIG rows), loaded from git, so the comparison needs
no copy of old code. The MIG node is the fleet's first sample with each GPU in MIG mode, split into 7 1g.10gb
instances, each held by a process. Times are CPU time, the best of --repeat rounds taking turns.

    .venv/bin/python -m devtools.bench_frames [--nodes 1000] [--gpus-per-node 8] [--repeat 30] [--json]
"""

import copy
import json
import time

import orjson

from dashboard.live import frames
from dashboard.live.state import ClusterState, NodeState
from devtools.fleet_burst import burst_arguments, one_burst
from devtools.git_source import module_at

BEFORE = "69e6027"  # the last commit before frames' MIG rows
MIG_INSTANCES = 7
GIB = 1024**3


def snapshot_bytes(builder_class, samples: list[dict]) -> bytes:
    """The snapshot a new builder frames for ``samples``, its send time left out (it differs run to run)."""
    builder, state = builder_class(), ClusterState()
    for s in samples:
        node = state.nodes[s["node"]] = NodeState(s["node"], s, arrived=s["ts"], placed=s["ts"])
        builder.update(node)
    _, snapshot = builder.frames(state, set(state.nodes), [], {}, lambda name: {}, {})
    frame = orjson.loads(snapshot)
    del frame["sent"]
    return orjson.dumps(frame)


def in_mig_mode(s: dict) -> dict:
    """``s`` with every GPU in MIG mode: MIG_INSTANCES instances, each held; util null, as NVML's."""
    s = copy.deepcopy(s)
    for gpu in s["gpus"]:
        instances = [{"gpu_instance": k + 7, "compute_instance": 0, "profile": "1g.10gb", "uuid": f"MIG-{k:08d}",
                      "mem_used": 4 * GIB, "mem_total": 10 * GIB, "sm_active": 0.4,
                      "processes": [{"pid": 1000 + k, "user": "ana"}]} for k in range(MIG_INSTANCES)]
        gpu.update(util=None, mig_enabled=True, mig=instances)
    return s


def best_update_us(builders: dict, s: dict, repeat: int, calls: int = 2000) -> dict:
    """µs per update() of node sample ``s``, per builder class: the best of ``repeat`` rounds of ``calls``."""
    node = NodeState(s["node"], s, arrived=s["ts"], placed=s["ts"])
    made = {name: builder_class() for name, builder_class in builders.items()}
    best = dict.fromkeys(builders, float("inf"))
    for _ in range(repeat):
        for name, builder in made.items():
            start = time.process_time()
            for _ in range(calls):
                builder.update(node)
            best[name] = min(best[name], time.process_time() - start)
    return {name: seconds / calls * 1e6 for name, seconds in best.items()}


def main() -> None:
    args = burst_arguments(__doc__.splitlines()[0])
    samples = one_burst(args.nodes, args.gpus_per_node)
    old = module_at(BEFORE, "dashboard/live/frames.py")
    before, now = snapshot_bytes(old.FrameBuilder, samples), snapshot_bytes(frames.FrameBuilder, samples)
    plain, mig = samples[0], in_mig_mode(samples[0])
    timed = best_update_us({"before": old.FrameBuilder, "now": frames.FrameBuilder}, plain, args.repeat)
    timed_mig = best_update_us({"now": frames.FrameBuilder}, mig, args.repeat)["now"]
    result = {
        "nodes": len(samples), "gpus_per_node": args.gpus_per_node,
        "snapshot_bytes_before": len(before), "snapshot_bytes_now": len(now),
        "snapshot_same": before == now,
        "update_us_per_node_before": timed["before"], "update_us_per_node_now": timed["now"],
        "update_us_per_mig_node": timed_mig,
        "added_us_per_mig_gpu": (timed_mig - timed["now"]) / args.gpus_per_node,
        "mig_part_bytes_per_gpu": len(orjson.dumps(frames.node_mig(mig["gpus"]))) / args.gpus_per_node,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['nodes']} nodes x {args.gpus_per_node} GPUs without MIG: snapshot {len(before)} bytes before, "
          f"{len(now)} now ({'the same frame' if before == now else 'DIFFERENT'})")
    print(f"  update() per node without MIG: {timed['before']:.1f} us before, {timed['now']:.1f} us now")
    print(f"  update() per node with {args.gpus_per_node} MIG GPUs x {MIG_INSTANCES} instances: {timed_mig:.1f} us, "
          f"{result['added_us_per_mig_gpu']:.1f} us more per MIG GPU; its part "
          f"{result['mig_part_bytes_per_gpu']:.0f} bytes per MIG GPU")


if __name__ == "__main__":
    main()
