import logging
import signal

from django.conf import settings
from django.core.management.base import BaseCommand

from dashboard.live.ingest import Ingest
from dashboard.live.publish import FramePublisher
from dashboard.redis_client import redis_client

log = logging.getLogger("gpulse.ingest")


class Command(BaseCommand):
    help = "Consume the telemetry streams: live frames, and the stages in GPULSE_INGEST_STAGES (minute rollups, ...)."

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
            consumer=consumer,
            max_clock_skew=settings.GPULSE_MAX_CLOCK_SKEW,
            forget_nodes_after=settings.GPULSE_NODE_FORGET_AFTER,
            forget_consumers_after=settings.GPULSE_INGEST_CONSUMER_FORGET_AFTER,
            max_unacked=settings.GPULSE_INGEST_MAX_UNACKED,
            busy_util=settings.GPULSE_BUSY_UTIL,
            busy_sm_activity=settings.GPULSE_BUSY_SM_ACTIVITY,
        )
        log.info("ingest %s reading %s every %.1f s", ingest.consumer, ingest.keys.telemetry_streams, tick)
        try:
            ingest.run(lambda: bool(stopping))
            ingest.finish()  # a deploy's SIGTERM: what was read is written and acknowledged
        finally:
            publisher.close()
        log.info("ingest stopped after %d samples (%d entries rejected)", ingest.processed, ingest.rejected)
