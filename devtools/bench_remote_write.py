"""What remote write costs: CPU for 8,000 GPUs every 15 s, sent to a real VictoriaMetrics.

A simulated fleet (collectors/simulated.py, --nodes of --gpus GPUs) is sampled once per round, parsed as ingest
parses it, and handed to a RemoteWriter as the ingest stage does; the writer's thread encodes the round
(/metrics' GPU and node series) and sends it to a victoria-metrics started here in a temporary folder (or to
--url). The writer thread's CPU time over the rounds (after a first round that encodes every label),
divided by the round interval, is the share of a core remote write takes (target: under 10 % at 8,000 GPUs,
15 s). Also printed: the stage's own cost on ingest's thread per round, samples per round, the memory the writer
added (its label cache, what the allocator kept of a round), and compressed bytes per sample (what the buffer
holds while the store is away).

With --outage SECONDS, after the first half of the rounds the victoria-metrics is stopped for SECONDS of wall
time while a round is still handed to the writer every --interval (as ingest would), then started again; the
writer is left to drain its buffer (GPULSE_REMOTE_WRITE_BUFFER_SAMPLES, as deployed) and the other half of the
rounds follow. Printed then: the buffer's peak, how long it took to drain once the store was back, the writer's
CPU outside the outage and over the whole run. Whenever the store is the one started here, the samples it
holds (raw samples counted series by series over the run's time range) are printed against those handed to
the writer, so that nothing lost is checked in the store, not in the writer's counters.

    .venv/bin/python -m devtools.bench_remote_write [--nodes 1000] [--gpus 8] [--rounds 8] [--interval 15]
                                                     [--outage 60] [--url http://host:8428/api/v1/write] [--json]
"""

import argparse
import gc
import itertools
import json
import math
import os
import tempfile
import time
from pathlib import Path

import django
import psutil


def thread_cpu(native_id: int | None) -> float:
    """CPU seconds (user and system) the thread has used."""
    times = next(thread for thread in psutil.Process().threads() if thread.id == native_id)
    return times.user_time + times.system_time


def drain(writer, handed_samples: int) -> int:
    """Wait until the writer has sent, dropped or had rejected every sample handed to it; its buffer's peak
    meanwhile, in samples (sampled every 50 ms). Counted, not read off an empty queue and buffer: the writer's
    thread takes a round off the queue before its samples reach the buffer."""
    peak = 0
    while sum(writer.stats()[outcome] for outcome in ("sent", "dropped", "rejected")) < handed_samples:
        if writer.skipped_rounds:
            raise SystemExit("the writer skipped a round: its samples will never be accounted for")
        peak = max(peak, writer.buffered_samples)
        time.sleep(0.05)
    return peak


def hand_in_turn(writer, offered: list[tuple[int, list[dict]]], upto: list[int], turns: range) -> None:
    """Hand these rounds one after the other, each once the one before is accounted for (``upto[n]``: the
    samples of rounds 0 to n): as fast as the writer goes, its CPU per round measured without the wait."""
    for n in turns:
        writer.offer(*offered[n])
        drain(writer, upto[n])


def hand_while_away(writer, rounds: list[tuple[int, list[dict]]], seconds: float, interval: float) -> int:
    """Hand the rounds one every ``interval`` seconds for ``seconds`` (the store is away); the buffer's peak."""
    started = time.monotonic()
    peak = handed = 0
    while time.monotonic() < started + seconds:
        if handed < len(rounds) and time.monotonic() >= started + handed * interval:
            writer.offer(*rounds[handed])
            handed += 1
        peak = max(peak, writer.buffered_samples)
        time.sleep(0.05)
    return peak


def stored_samples(server, first_ms: int, last_ms: int) -> int:
    """The raw samples the store holds from first_ms to last_ms, counted series by series. A metric at a time,
    each under -search.maxUniqueTimeseries (300,000), which the whole of 8,000 GPUs' 240,000 series nears."""
    window_ms = last_ms - first_ms + 1  # count_over_time's window is (at - window, at]
    return sum(int(series["value"][1])
               for name in server.metric_names()
               for series in server.query(f"sum(count_over_time({name}[{window_ms}ms]))", last_ms / 1000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--outage", type=float, default=0.0, metavar="SECONDS",
                        help="stop the store for this long after the first half of the rounds (default 0: none)")
    parser.add_argument("--url", help="a remote-write endpoint (default: a victoria-metrics started here)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.interval <= 0:
        parser.error("--rounds must be at least 1 and --interval above 0")
    if args.outage < 0:
        parser.error("--outage must be 0 (none) or more seconds")
    if args.outage and args.url:
        parser.error("--outage stops the victoria-metrics started here: it cannot be used with --url")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    from django.conf import settings

    from collectors.simulated import SimulatedFleet
    from dashboard.live.ingest import GC_THRESHOLDS
    from dashboard.longterm.encoding import LabelCache, encode_round
    from dashboard.longterm.store import parse_store_url
    from dashboard.longterm.writer import RemoteWriter
    from devtools.victoria_metrics import VictoriaMetrics
    from gpulse import schema

    away_rounds = math.ceil(args.outage / args.interval)
    before = args.rounds // 2 if args.outage else args.rounds
    server = None
    with tempfile.TemporaryDirectory() as folder:
        url = args.url
        if url is None:
            server = VictoriaMetrics(Path(folder))
            server.start()
            url = server.write_url
        clock = [time.time() - (args.rounds + away_rounds) * args.interval]
        fleet = SimulatedFleet(args.nodes, args.gpus, args.interval, seed=1, clock=lambda: clock[0])
        buffer_limit = settings.GPULSE_REMOTE_WRITE_BUFFER_SAMPLES
        writer = RemoteWriter(parse_store_url(url, "--url"), headers={}, timeout=30, max_samples=buffer_limit)
        try:
            rounds = []
            for _ in range(args.rounds + away_rounds):
                samples = [schema.parse(schema.encode(sample)) for sample in fleet.sample()]
                started = time.perf_counter()
                # what the stage does on ingest's thread
                nodes = [{"node": s["node"], "status": "up", "ts": s["ts"], "gpus": s["gpus"],
                          "twin_collectors": None} for s in samples]
                handed = time.perf_counter() - started
                rounds.append((int(clock[0] // args.interval * args.interval * 1000), nodes, handed))
                clock[0] += args.interval
            # the first round, handed one interval before the others, encodes every label once
            offered = [(rounds[0][0] - int(args.interval * 1000), rounds[0][1]), *(r[:2] for r in rounds)]
            upto = list(itertools.accumulate(sum(batch.samples for batch in encode_round(nodes, at, LabelCache()))
                                             for at, nodes in offered))
            rss_before = psutil.Process().memory_info().rss
            gc.freeze()  # as ingest does: the writer's thread runs under ingest's collector settings
            gc.set_threshold(*GC_THRESHOLDS)
            hand_in_turn(writer, offered, upto, range(1))
            cpu_started = thread_cpu(writer.thread.native_id)
            hand_in_turn(writer, offered, upto, range(1, before + 1))
            cpu_away = 0.0
            if args.outage:
                assert server is not None
                cpu_outage_started = thread_cpu(writer.thread.native_id)
                server.stop()
                buffer_peak = hand_while_away(writer, offered[before + 1:before + away_rounds + 1], args.outage,
                                              args.interval)
                server.start()
                back = time.monotonic()
                buffer_peak = max(buffer_peak, drain(writer, upto[before + away_rounds]))
                drain_s = time.monotonic() - back
                cpu_away = thread_cpu(writer.thread.native_id) - cpu_outage_started
            hand_in_turn(writer, offered, upto, range(before + away_rounds + 1, len(offered)))
            cpu_whole = thread_cpu(writer.thread.native_id) - cpu_started
            cpu = cpu_whole - cpu_away
            rss_added = psutil.Process().memory_info().rss - rss_before
            stats = writer.stats()
            stored = None if server is None else stored_samples(server, offered[0][0], offered[-1][0])
        finally:
            writer.stop()
            if server is not None:
                server.stop()
    batches = encode_round(rounds[-1][1], rounds[-1][0], LabelCache())
    samples_per_round = sum(batch.samples for batch in batches)
    result = {
        "gpus": args.nodes * args.gpus,
        "interval_s": args.interval,
        "samples_per_round": samples_per_round,
        "writer_cpu_s_per_round": round(cpu / args.rounds, 3),
        "core_share_percent": round(100 * cpu / args.rounds / args.interval, 2),
        "stage_ms_per_round_on_ingest": round(1000 * sum(r[2] for r in rounds) / len(rounds), 2),
        "writer_rss_mb": round(rss_added / 2**20),
        "compressed_bytes_per_sample": round(sum(len(b.body) for b in batches) / samples_per_round, 1),
        "handed_samples": upto[-1],
        "stored_samples": stored,
        "sent": stats["sent"], "failed": stats["failed"], "dropped": stats["dropped"],
        "rejected": stats["rejected"], "skipped_rounds": stats["skipped_rounds"],
    }
    if args.outage:
        result |= {
            "outage_s": args.outage,
            "rounds_during_outage": away_rounds,
            "buffer_limit_samples": buffer_limit,
            "buffer_peak_samples": buffer_peak,
            "drain_s_after_store_back": round(drain_s, 1),
            "writer_cpu_s_outage_and_drain": round(cpu_away, 3),
            "core_share_percent_whole_run": round(100 * cpu_whole / (args.rounds + away_rounds) / args.interval, 2),
        }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")


if __name__ == "__main__":
    main()
