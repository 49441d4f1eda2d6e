"""CPU of one NVML collector: `python -m collectors --source nvml`, 8 GPUs at 1 Hz, into a real Redis.

The GPUs are the fake libnvidia-ml.so.1 of the test suite (tests/fake_nvml,
built here with gcc): the real nvidia-ml-py binding and the real collector
run unchanged, only the driver library answers from memory. A real driver
spends more time per call inside the library; what this measures is the
collector's own work (the Python around NVML, JSON, Redis writes). On a GPU
node, --driver real measures the collector on the node's own GPUs instead.

The first seconds (imports, NVML start-up) are left out; CPU is the
collector's user + system time over the measured window, in percent of one
core. Probes are off (--probe-interval 0): they run every 10 minutes in
processes of their own.

--processes N puts N processes on each fake GPU (live processes of this
machine, so their owners are read as a real GPU's are). With --mig, each fake
GPU is in MIG mode with 7 instances (1g.10gb, the most an H100 holds), each
running one of those processes (--processes 7 by default): compare with
--processes 7 alone for what MIG itself costs.

    .venv/bin/python -m devtools.measure_collector_cpu [--gpus 8] [--interval 1] [--duration 60] [--json]
        [--processes N] [--mig]
    python -m devtools.measure_collector_cpu --driver real [--duration 60] [--json]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import redis

from collectors.arguments import non_negative_float, positive_float, positive_int
from devtools.redis_server import EmbeddedRedis
from gpulse.keys import Keys
from tests import fake_nvml

ROOT = Path(__file__).resolve().parent.parent

SETTLE_SECONDS = 5.0


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


MIG_SLOTS = 7


def fake_layout(gpus: int, processes: int, mig: bool) -> dict:
    """The fake's settings: ``processes`` live processes on each GPU, or with ``mig`` 7 1g.10gb instances
    each, instance s running process s."""
    pids = sorted(psutil.pids())[:processes]
    if not mig:
        return {"gpus": gpus, "procs": [f"{g}:{pid}:1073741824:c" for g in range(gpus) for pid in pids]}
    return {"gpus": gpus, "mig": "1:1",
            "mig_devices": [f"{g}:{s}:{7 + s}:0:1g.10gb" for g in range(gpus) for s in range(MIG_SLOTS)],
            "procs": [f"{g}:{pid}:1073741824:c:{7 + s}:0" for g in range(gpus) for s, pid in enumerate(pids)]}


def measure(gpus: int | None, interval: float, duration: float, energy_interval: float | None = None,
            processes: int = 0, mig: bool = False) -> dict:
    """The collector's CPU over ``duration``; ``gpus`` fake GPUs, or with None the machine's driver and GPUs."""
    server = EmbeddedRedis().start()
    collector = None
    try:
        env = None if gpus is None else fake_nvml.subprocess_env(fake_nvml.config(**fake_layout(gpus, processes, mig)))
        collector = subprocess.Popen(
            [sys.executable, "-m", "collectors", "--source", "nvml", "--redis-url", server.url,
             "--node-name", "cpu-bench", "--interval", str(interval), "--probe-interval", "0",
             *([] if energy_interval is None else ["--energy-interval", str(energy_interval)])],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        meter = psutil.Process(collector.pid)
        time.sleep(SETTLE_SECONDS)
        client = redis.Redis.from_url(server.url)
        entries_before = client.xlen(Keys().telemetry_stream("cpu-bench"))
        start_cpu, start = cpu_seconds(meter), time.monotonic()
        peak_rss = 0
        while time.monotonic() - start < duration:
            if collector.poll() is not None:
                assert collector.stderr is not None  # stderr=PIPE
                raise RuntimeError(f"the collector exited: {collector.stderr.read().decode()[-2000:]}")
            peak_rss = max(peak_rss, meter.memory_info().rss)
            time.sleep(min(1.0, duration - (time.monotonic() - start)))
        cpu, elapsed = cpu_seconds(meter) - start_cpu, time.monotonic() - start
        samples = client.xlen(Keys().telemetry_stream("cpu-bench")) - entries_before
        newest = client.xrevrange(Keys().telemetry_stream("cpu-bench"), count=1)
        client.close()
    finally:
        if collector is not None and collector.poll() is None:
            collector.terminate()
            collector.wait(10)
        server.stop()
    return {
        "cpu_percent": round(100.0 * cpu / elapsed, 2),
        "cpu_ms_per_sample": round(1000.0 * cpu / samples, 2) if samples else None,
        "samples": samples,
        "expected_samples": round(elapsed / interval),
        "rss_mb": round(peak_rss / 2**20, 1),
        "gpus": len(orjson.loads(newest[0][1][b"s"])["gpus"]) if newest else gpus,
        "mig_instances": sum(len(gpu.get("mig") or ()) for gpu in orjson.loads(newest[0][1][b"s"])["gpus"])
        if newest else None,
        "driver": "fake" if gpus is not None else "real",
        "interval": interval,
        "duration": round(elapsed, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=positive_int, default=8, help="fake GPUs (with --driver fake)")
    parser.add_argument("--driver", choices=("fake", "real"), default="fake",
                        help="fake: tests/fake_nvml; real: this machine's NVIDIA driver and GPUs")
    parser.add_argument("--interval", type=positive_float, default=1.0)
    parser.add_argument("--duration", type=positive_float, default=60.0, help="seconds measured, after 5 s of start-up")
    parser.add_argument("--energy-interval", type=non_negative_float,
                        help="the collector's --energy-interval (default: the collector's)")
    parser.add_argument("--processes", type=int, choices=range(MIG_SLOTS + 1), metavar="0-7",
                        help="processes on each fake GPU (default 0; 7 with --mig)")
    parser.add_argument("--mig", action="store_true", help="each fake GPU in MIG mode with 7 instances")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    processes = args.processes if args.processes is not None else MIG_SLOTS if args.mig else 0
    result = measure(args.gpus if args.driver == "fake" else None, args.interval, args.duration,
                     args.energy_interval, processes, args.mig)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"nvml collector, {result['gpus']} {result['driver']} GPUs ({result['mig_instances']} MIG instances) "
              f"every {result['interval']:g} s, "
              f"{result['duration']:g} s: "
              f"{result['cpu_percent']:.2f} % of one core ({result['cpu_ms_per_sample']} ms CPU per sample), "
              f"{result['samples']} of {result['expected_samples']} samples written, "
              f"peak RSS {result['rss_mb']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
