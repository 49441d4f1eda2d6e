import signal
import sys

import orjson
from django.core.management.base import BaseCommand, CommandError

from dashboard.loadtest import report
from dashboard.loadtest.run import Options, run


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise ValueError
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


class Command(BaseCommand):
    help = (
        "Drive the real pipeline (simulated collectors -> Redis -> ingest -> web -> websocket clients) "
        "on this machine and report throughput, latency, CPU and memory."
    )

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=_positive(int), default=1000)
        parser.add_argument("--gpus-per-node", type=_positive(int), default=8)
        parser.add_argument("--interval", type=_positive(float), default=1.0, help="seconds between samples")
        parser.add_argument("--duration", type=_positive(float), default=60.0, help="seconds measured, after warm-up")
        parser.add_argument("--clients", type=_positive(int), default=20, help="websocket clients on /ws/cluster/")
        parser.add_argument("--collectors", type=_positive(int),
                            help="simulated collector processes sharing the nodes (default: one per 250, at most 4)")
        parser.add_argument("--warmup", type=float, default=5.0, help="seconds of full frames before measuring")
        parser.add_argument("--redis-url",
                            help="use this Redis (under a key prefix of its own) instead of a private one")
        parser.add_argument("--browser", type=float, nargs="?", const=20.0, default=0.0, metavar="SECONDS",
                            help="after the window, time the overview page in headless Chromium (default 20 s)")
        parser.add_argument("--ws-compression", action="store_true",
                            help="run web with uvicorn's per-message deflate on (its default; gpulse turns it off)")
        parser.add_argument("--json", action="store_true", help="print the result as one JSON object")

    def handle(self, *args, **options):
        # SIGTERM ends the run like Ctrl-C: through the finally blocks that stop every process.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        run_options = Options(
            nodes=options["nodes"], gpus_per_node=options["gpus_per_node"], interval=options["interval"],
            duration=options["duration"], clients=options["clients"], collectors=options["collectors"],
            redis_url=options["redis_url"], warmup=options["warmup"], browser_seconds=options["browser"],
            ws_compression=options["ws_compression"],
        )
        def say(line: str) -> None:
            if options["verbosity"] >= 1:
                print(line, file=sys.stderr, flush=True)

        try:
            result = run(run_options, say)
        except (RuntimeError, ValueError) as exc:
            raise CommandError(f"load test failed: {exc}") from None
        except KeyboardInterrupt:
            raise CommandError("load test interrupted; every process it started was stopped") from None
        if options["json"]:
            self.stdout.write(orjson.dumps(result).decode())
        else:
            self.stdout.write(report.table(result))
