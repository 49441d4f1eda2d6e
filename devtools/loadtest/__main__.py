"""`python -m devtools.loadtest`: run one load test and print its result.

    .venv/bin/python -m devtools.loadtest --nodes 1000 --gpus-per-node 8 --interval 1 --duration 60 --clients 20 --json

It starts every process it measures as a child (they set up Django
themselves) and stops them all, also on Ctrl-C or SIGTERM.
"""

import argparse
import signal
import sys

import orjson

from collectors.arguments import non_negative_float, positive_float, positive_int
from devtools.loadtest import report
from devtools.loadtest.run import Options, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.loadtest",
        description="Drive the real pipeline (simulated collectors -> Redis -> ingest -> web -> websocket clients) "
                    "on this machine and report throughput, latency, CPU and memory.",
    )
    parser.add_argument("--nodes", type=positive_int, default=1000)
    parser.add_argument("--gpus-per-node", type=positive_int, default=8)
    parser.add_argument("--interval", type=positive_float, default=1.0, help="seconds between samples")
    parser.add_argument("--duration", type=positive_float, default=60.0, help="seconds measured, after warm-up")
    parser.add_argument("--clients", type=positive_int, default=20, help="websocket clients on /ws/cluster/")
    parser.add_argument("--collectors", type=positive_int,
                        help="simulated collector processes sharing the nodes (default: one per 250, at most 4)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of full frames before measuring")
    parser.add_argument("--redis-url", help="use this Redis (under a key prefix of its own) instead of a private one")
    parser.add_argument("--database-url", help="use this database (migrated first; each run adds a user "
                                               "loadtest-<hex>) instead of a SQLite file of the run's own")
    parser.add_argument("--browser", type=float, nargs="?", const=20.0, default=0.0, metavar="SECONDS",
                        help="after the window, time the overview page in headless Chromium (default 20 s)")
    parser.add_argument("--web-processes", type=positive_int, default=1,
                        help="web server processes behind the one port (uvicorn --workers, as WEB_CONCURRENCY in "
                             "docker-compose.yml); the clients are spread over them and CPU is their sum (default 1)")
    parser.add_argument("--ws-compression", action="store_true",
                        help="run web with uvicorn's per-message deflate on (its default; gpulse turns it off)")
    parser.add_argument("--retention", type=non_negative_float, default=0.0, metavar="SECONDS",
                        help="run the retention pass (downsample, partitions, prune) every SECONDS during the window, "
                             "after seeding expired minute rows (default 0: off)")
    parser.add_argument("--retention-hours", type=positive_float, default=1.0, metavar="HOURS",
                        help="with --retention: hours of minute rollups and usage minutes per GPU past their "
                             "retention, seeded before the run (default 1)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("-v", "--verbosity", type=int, choices=(0, 1, 2, 3), default=1,
                        help="0: no progress lines on stderr (default 1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM ends the run like Ctrl-C: through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    options = Options(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, interval=args.interval, duration=args.duration,
        clients=args.clients, collectors=args.collectors, redis_url=args.redis_url,
        database_url=args.database_url, warmup=args.warmup,
        browser_seconds=args.browser, ws_compression=args.ws_compression, web_processes=args.web_processes,
        retention=args.retention, retention_hours=args.retention_hours,
    )

    def say(line: str) -> None:
        if args.verbosity >= 1:
            print(line, file=sys.stderr, flush=True)

    try:
        result = run(options, say)
    except (RuntimeError, ValueError) as exc:
        print(f"loadtest: load test failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loadtest: load test interrupted; every process it started was stopped", file=sys.stderr)
        return 1
    print(orjson.dumps(result).decode() if args.json else report.table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
