"""The load test's result: the JSON schema `--json` prints, and the table people read."""

import numpy as np

TREND_SECONDS = 10  # lag of the first and the last this-many seconds, to see whether it grows


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(float(seconds) * 1000.0, 1)


def percentiles(values: np.ndarray) -> dict:
    if values.size == 0:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": ms(p50), "p99": ms(p99), "max": ms(values.max())}


def pooled(per_frame: list[np.ndarray]) -> dict:
    """Percentiles over every node of every frame."""
    return percentiles(np.concatenate(per_frame) if per_frame else np.empty(0))


def lag_summary(per_frame: list[np.ndarray], interval: float) -> dict:
    """Percentiles over every node of every frame, plus the median lag at the start and at the end."""
    summary = pooled(per_frame)
    edge = max(1, round(TREND_SECONDS / interval))
    if len(per_frame) >= 2 * edge:
        summary["first_10s_p50"] = ms(np.median(np.concatenate(per_frame[:edge])))
        summary["last_10s_p50"] = ms(np.median(np.concatenate(per_frame[-edge:])))
    return summary


def _ms(d: dict, keys: tuple[str, ...], digits: int = 0) -> str:
    return " / ".join("-" if d.get(k) is None else f"{d[k]:.{digits}f} ms" for k in keys)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _trend(lag: dict) -> str:
    if lag.get("first_10s_p50") is None:
        return "- (needs a run of 20 s or more)"
    return _ms(lag, ("first_10s_p50", "last_10s_p50"))


ROWS = (
    ("samples/s ingested", lambda r: f"{r['samples_per_s']:.1f} of {r['expected_samples_per_s']:.1f} expected"),
    ("dropped samples", lambda r: f"{r['dropped']} (collector ticks missed: {r['collector_missed_ticks']})"),
    ("ingest lag p50 / p99 / max", lambda r: _ms(r["ingest_lag_ms"], ("p50", "p99", "max"))),
    ("ingest lag first / last 10 s", lambda r: _trend(r["ingest_lag_ms"])),
    ("end-to-end p50 / p99 / max", lambda r: _ms(r["e2e_latency_ms"], ("p50", "p99", "max"))),
    ("delta frame (mean) / snapshot", lambda r: f"{r['frame_bytes'] / 1024:.0f} KiB / "
                                                f"{r['snapshot_bytes'] / 1024:.0f} KiB"),
    ("CPU ingest / web (of one core)", lambda r: " / ".join(map(_percent, r["cpu_percent"].values()))),
    ("CPU collectors / redis / clients", lambda r: " / ".join(
        _percent(r[key]) for key in ("collector_cpu_percent", "redis_cpu_percent", "client_cpu_percent"))),
    ("RSS ingest / web start > end (peak)", lambda r: " / ".join(
        f"{m['start']:.0f} > {m['end']:.0f} MiB ({m['peak']:.0f})" for m in r["rss_mb"].values())),
    ("Redis used memory", lambda r: f"{r['redis_mb']:.0f} MiB now, about {r['redis_mb_bound']:.0f} MiB once the "
                                    f"node streams (MAXLEN {r['telemetry_maxlen']:,} each) and recent points are full"),
    ("websocket clients", lambda r: f"{r['clients']}, {r['frames_per_client']:.1f} deltas each (fewest "
                                    f"{r['frames_per_client_min']}), per web process {r['clients_per_web_process']}"),
)


def table(result: dict) -> str:
    title = (f"gpulse load test: {result['nodes']} nodes x {result['gpus_per_node']} GPUs every "
             f"{result['interval']:g} s, {result['duration']:g} s, {result['clients']} clients, "
             f"{result['collectors']} collector processes")
    rows = [(label, fmt(result)) for label, fmt in ROWS]
    retention = result.get("retention")
    if retention:
        keys = ("p50", "p99", "max")
        durations = retention["pass_s"]
        rows.append(("retention passes / longest", f"{retention['passes']} every {retention['every_s']:g} s / "
                                                    f"{max(durations, default=0):.1f} s"))
        rows.append(("rows pruned / hourly rows written", f"{sum(retention['pruned'].values()):,} / "
                                                           f"{retention['hourly_rows_written']:,}"))
        for key in ("during_passes", "outside_passes"):
            rows.append((f"end-to-end {key.replace('_', ' ')}", _ms(result["e2e_latency_ms"][key], keys)))
    browser = result.get("browser")
    if browser:
        keys = ("p50", "p95", "max")
        rows.append(("browser: handle a frame p50/p95/max", _ms(browser["handle_ms"], keys, 1)))
        rows.append(("browser: render it p50/p95/max", _ms(browser["render_ms"], keys, 1)))
    width = max(len(label) for label, _ in rows)
    return "\n".join([title, "-" * len(title), *(f"{label:<{width}}  {value}" for label, value in rows)])
