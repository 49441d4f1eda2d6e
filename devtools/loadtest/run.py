"""Run one load test: start the system, warm it up, measure a window of whole intervals, stop everything."""

import asyncio
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import redis

from devtools.loadtest.browser import measure_overview
from devtools.loadtest.clients import ClientFleet
from devtools.loadtest.meter import ProcessMeter
from devtools.loadtest.pruner import during, read_passes, summary
from devtools.loadtest.report import lag_summary, percentiles, pooled
from devtools.loadtest.system import LoadSystem
from gpulse.keys import RECENT_POINTS, TELEMETRY_MAXLEN

MiB = 2**20


@dataclass(frozen=True)
class Options:
    nodes: int = 1000
    gpus_per_node: int = 8
    interval: float = 1.0
    duration: float = 60.0
    clients: int = 20
    collectors: int | None = None  # None: one per 250 nodes, at most 4
    redis_url: str | None = None  # None: a private redis-server for the run
    database_url: str | None = None  # None: a SQLite file of the run's own
    warmup: float = 5.0
    browser_seconds: float = 0.0  # > 0: time the overview page in Chromium for this long after the window
    ws_compression: bool = False  # let uvicorn deflate each frame per client (its default; see system.py)
    web_processes: int = 1  # uvicorn --workers: each browser is served by one of them
    retention: float = 0.0  # > 0: a retention pass this many seconds apart during the window (pruner.py)
    retention_hours: float = 1.0  # hours of minute rows per GPU past their retention, seeded first (seed.py)


# Seeded rows expire through this long after the window's expected start, past the start-up and warm-up.
SEED_AHEAD_S = 600.0


def seed_arguments(options: Options) -> list[str] | None:
    """devtools.loadtest.seed's arguments for the run, None without retention passes."""
    if options.retention <= 0:
        return None
    ahead = options.warmup + options.duration + SEED_AHEAD_S
    return ["--nodes", str(options.nodes), "--gpus-per-node", str(options.gpus_per_node),
            "--hours", str(options.retention_hours), "--ahead", str(ahead)]


def run(options: Options, say: Callable[[str], None] = lambda line: None) -> dict:
    """Return the result (report.py's schema); every process started is stopped, whatever happens."""
    system = LoadSystem(options.nodes, options.gpus_per_node, options.interval, options.collectors,
                        options.redis_url, options.ws_compression, options.database_url,
                        seed=seed_arguments(options), web_processes=options.web_processes)
    keep_logs = False
    try:
        say(f"starting Redis, web, ingest and {system.collectors} collector processes (state in {system.state_dir})")
        if options.retention > 0:
            say(f"seeding {options.retention_hours:g} h of expired minute rows per GPU first")
        system.start()
        session = system.login()
        return asyncio.run(measure(system, session, options, say))
    except Exception as exc:
        keep_logs = True
        raise RuntimeError(f"{exc}\n(the processes' logs are kept in {system.state_dir})") from exc
    finally:
        system.stop(keep_logs=keep_logs)


async def measure(system: LoadSystem, session: str, options: Options, say: Callable[[str], None]) -> dict:
    fleet = ClientFleet(system.url, session, options.clients)
    client = redis.Redis.from_url(system.redis_url)
    try:
        await fleet.start()
        say(f"{options.clients} websocket clients connected; waiting for frames that carry every node")
        await fleet.wait_for_full_frames(options.nodes, timeout=60.0)

        # The window is whole intervals of the collectors' sampling grid, after the warm-up: it holds
        # the samples taken from its first grid point on, duration / interval bursts.
        interval = options.interval
        periods = max(1, round(options.duration / interval))
        first = (math.floor((time.time() + options.warmup) / interval) + 1) * interval
        window = (first, first + periods * interval)
        # Started now, so it has set up Django by the window's start, when it runs its first pass.
        passes_log = system.start_pruner(options.retention, window) if options.retention > 0 else None
        await asyncio.sleep(first - time.time())
        system.check_running()
        meters = {role: ProcessMeter(pids) for role, pids in system.pids().items()}
        meters["clients"] = ProcessMeter([os.getpid()])
        for meter in meters.values():
            meter.start()
        fleet.recording = True
        say(f"measuring for {periods * interval:g} s")
        while (left := window[1] - time.time()) > 0:
            await asyncio.sleep(min(1.0, left))
            for meter in meters.values():
                meter.sample()
            system.check_running()
        for meter in meters.values():
            meter.stop()
        # The window's last burst is framed after it ends: wait for the next one's frame.
        await fleet.wait_for_samples_from(window[1], timeout=3 * interval + 2)
        fleet.recording = False
        memory = redis_memory(client, system)
        snapshot_bytes = client.strlen(system.keys.snapshot)

        browser = None
        if options.browser_seconds > 0:
            say(f"timing the overview page in Chromium for {options.browser_seconds:g} s")
            browser = await measure_overview(system.url, session, options.browser_seconds)
        clients_per_web_process = system.clients_per_web_process()
        lost = fleet.disconnected()
        if lost:
            raise RuntimeError("websocket clients were disconnected: " + "; ".join(lost[:3]))
    finally:
        await fleet.stop()
        client.close()

    expected = options.nodes * periods
    received = fleet.samples_received(window)
    sizes = fleet.frame_sizes()
    deltas = fleet.deltas_per_client(window)
    result = {
        "samples_per_s": round(received / (periods * interval), 1),
        "expected_samples_per_s": round(options.nodes / interval, 1),
        "ingest_lag_ms": lag_summary(fleet.ingest_lags(window), interval),
        "e2e_latency_ms": percentiles(fleet.latencies(window)),
        "frame_bytes": round(float(np.mean(sizes))) if sizes else 0,
        "cpu_percent": {"ingest": round(meters["ingest"].cpu_percent, 1), "web": round(meters["web"].cpu_percent, 1)},
        "rss_mb": {"ingest": meters["ingest"].rss_mb(), "web": meters["web"].rss_mb()},
        "redis_mb": memory["used_mb"],
        "dropped": expected - received,
        "redis_mb_bound": memory["bound_mb"],
        "telemetry_maxlen": TELEMETRY_MAXLEN,
        "snapshot_bytes": snapshot_bytes,
        "collector_cpu_percent": round(meters["collector"].cpu_percent, 1),
        "redis_cpu_percent": round(meters["redis"].cpu_percent, 1) if "redis" in meters else None,
        "client_cpu_percent": round(meters["clients"].cpu_percent, 1),
        "collector_missed_ticks": system.collector_missed_ticks(),
        "clients": options.clients,
        "web_processes": options.web_processes,
        "clients_per_web_process": clients_per_web_process,
        "frames_per_client": round(float(np.mean(deltas)), 1),
        "frames_per_client_min": min(deltas),
        "collectors": system.collectors,
        "nodes": options.nodes,
        "gpus_per_node": options.gpus_per_node,
        "interval": interval,
        "duration": periods * interval,
    }
    if browser is not None:
        result["browser"] = browser
    if passes_log is not None:
        passes = read_passes(passes_log)
        in_pass = during(passes, window[1])

        def outside(ts: np.ndarray) -> np.ndarray:
            return ~in_pass(ts)

        for key, where in (("during_passes", in_pass), ("outside_passes", outside)):
            result["e2e_latency_ms"][key] = percentiles(fleet.latencies(window, where))
            result["ingest_lag_ms"][key] = pooled(fleet.ingest_lags(window, where))
        result["retention"] = {**summary(passes, options.retention, system.seeded),
                               "cpu_percent": round(meters["pruner"].cpu_percent, 1)}
    return result


def redis_memory(client: redis.Redis, system: LoadSystem) -> dict:
    """Return Redis's used memory now, and an estimate once the streams and the recent-point lists are full."""
    used = client.info("memory")["used_memory"]
    keys = system.keys
    bound = used
    first_node = client.hkeys(keys.known_nodes)[:1]
    if first_node:
        stream = keys.telemetry_stream(first_node[0].decode())
        stream_len = client.xlen(stream)
        if stream_len:
            per_entry = (client.memory_usage(stream) or 0) / stream_len
            bound += per_entry * max(0, TELEMETRY_MAXLEN - stream_len) * system.nodes
        recent_key = keys.recent(first_node[0].decode())
        points = client.llen(recent_key)
        if points:
            per_point = (client.memory_usage(recent_key) or 0) / points
            bound += per_point * max(0, RECENT_POINTS - points) * system.nodes
    return {"used_mb": round(used / MiB, 1), "bound_mb": round(bound / MiB, 1)}
