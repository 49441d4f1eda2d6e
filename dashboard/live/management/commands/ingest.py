import logging
import signal

from django.conf import settings
from django.core.management.base import BaseCommand

from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.live.ingest import Ingest
from dashboard.live.publish import FramePublisher
from dashboard.redis_client import redis_client
from dashboard.summary import cluster_summary

log = logging.getLogger("gpulse.ingest")


class Command(BaseCommand):
    help = "Consume the telemetry stream: live frames to browsers, alert evaluation, minute rollups."

    def add_arguments(self, parser):
        parser.add_argument("--tick", type=float, default=settings.GPULSE_TICK, help="seconds between frames")
        parser.add_argument(
            "--consumer",
            help="consumer name in the group (default: the host name; keep it stable across restarts)",
        )

    def handle(self, tick, consumer, **options):
        stopping = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.append(True))
        publisher = FramePublisher()
        ingest = Ingest(
            redis_client(),
            publisher.publish,
            tick=tick,
            evaluator=AlertEvaluator(),
            summary=cluster_summary,
            consumer=consumer,
            probe_low_fraction=settings.GPULSE_PROBE_LOW_FRACTION,
            flush_interval=settings.GPULSE_ROLLUP_FLUSH_INTERVAL,
            max_rollup_rows=settings.GPULSE_ROLLUP_MAX_ROWS,
            max_unacked=settings.GPULSE_INGEST_MAX_UNACKED,
        )
        log.info("ingest %s reading %s every %.1f s", ingest.consumer, ingest.keys.telemetry, tick)
        try:
            ingest.run(lambda: bool(stopping))
            ingest.finish()  # a deploy's SIGTERM: what was read is written and acknowledged
        finally:
            publisher.close()
        log.info("ingest stopped after %d samples (%d malformed)", ingest.processed, ingest.malformed)
