"""Cost of the sample contract: parse + validate of a 1,000-node x 8-GPU burst, against the parse before it.

Four readers: orjson alone ("json_only"), the parse before validate() ("before"),
read() without its fast gate, validate() on every entry ("checked"), and read()
itself ("now"), whose fast gate takes every entry of the burst.

The burst is what ingest reads each second at 8,000 GPUs: one encoded sample
per node from the simulated fleet (the same code `make demo` runs). The "before"
parse is gpulse/schema.py as of commit BEFORE (types of the numeric readings
only), loaded from git, so the comparison needs no copy of old code. Each is
timed over whole bursts, taking turns (best of --repeat rounds), in microseconds per sample.

    .venv/bin/python -m devtools.bench_parse [--nodes 1000] [--gpus-per-node 8] [--repeat 30] [--json]
"""

import json
import time
import types

from devtools.fleet_burst import burst_arguments, one_burst
from devtools.git_source import module_at
from gpulse import schema

BEFORE = "ece1447"  # the last commit before gpulse.schema.validate


def schema_before() -> types.ModuleType:
    return module_at(BEFORE, "gpulse/schema.py")


def best_per_sample_us(parsers: dict, burst: list[bytes], repeat: int) -> dict:
    """Time each parser over the whole burst, taking turns round by round (so a busy
    machine slows them alike), in CPU time; return the best round of each, in µs per sample."""
    best = dict.fromkeys(parsers, float("inf"))
    for _ in range(repeat):
        for name, parse in parsers.items():
            start = time.process_time()
            for raw in burst:
                parse(raw)
            best[name] = min(best[name], time.process_time() - start)
    return {name: seconds / len(burst) * 1e6 for name, seconds in best.items()}


def main() -> None:
    args = burst_arguments(__doc__.splitlines()[0])
    burst = [schema.encode(sample) for sample in one_burst(args.nodes, args.gpus_per_node)]
    assert all(schema.read_fast(raw) is not None for raw in burst), "an entry of the burst missed the fast gate"
    old = schema_before()
    timed = best_per_sample_us(
        {"json_only": schema.orjson.loads, "before": old.parse, "checked": schema.read_checked, "now": schema.read},
        burst, args.repeat,
    )
    result = {
        "samples": len(burst),
        "gpus_per_sample": args.gpus_per_node,
        "bytes_per_sample": round(sum(map(len, burst)) / len(burst)),
        **{f"{name}_us_per_sample": us for name, us in timed.items()},
    }
    added = result["now_us_per_sample"] - result["before_us_per_sample"]
    result["added_ms_per_burst"] = added * len(burst) / 1000
    # A burst a second: the added time is this share of one core.
    result["added_percent_of_a_core"] = added * len(burst) / 1e6 * 100
    # What checking costs on top of decoding alone: the share issue 16 bounds (< 5 % of ingest's CPU).
    result["check_ms_per_burst"] = (result["now_us_per_sample"] - result["json_only_us_per_sample"]) * len(burst) / 1000
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['samples']} samples x {args.gpus_per_node} GPUs, {result['bytes_per_sample']} bytes each")
    for key in ("json_only", "before", "checked", "now"):
        print(f"  {key:<10} {result[key + '_us_per_sample']:8.1f} us per sample")
    print(f"  added by validation: {result['added_ms_per_burst']:.1f} ms per burst, "
          f"{result['added_percent_of_a_core']:.2f} % of one core at one burst a second")
    print(f"  checking on top of orjson alone: {result['check_ms_per_burst']:.1f} ms per burst")


if __name__ == "__main__":
    main()
