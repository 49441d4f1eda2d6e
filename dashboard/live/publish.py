"""Send frames to the Channels group from ingest's synchronous loop."""

import asyncio
import logging
import threading

from channels.layers import get_channel_layer

CLUSTER_GROUP = "cluster"

log = logging.getLogger(__name__)


class FramePublisher:
    """Own one event loop in a thread, so the channel layer keeps its Redis
    connection across ticks instead of opening one per async_to_sync call."""

    def __init__(self, timeout: float = 2.0):
        self.timeout = timeout
        self.layer = get_channel_layer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="frame-publisher", daemon=True)
        self.thread.start()

    def publish(self, frame: bytes) -> bool:
        """Send one frame to every browser; return False (and log) if it could not go out."""
        message = {"type": "cluster.frame", "text": frame.decode()}
        future = asyncio.run_coroutine_threadsafe(self.layer.group_send(CLUSTER_GROUP, message), self.loop)
        try:
            future.result(self.timeout)
            return True
        except Exception as exc:  # the layer raises redis and asyncio errors alike
            future.cancel()
            log.warning("could not publish frame to browsers: %s", exc or type(exc).__name__)
            return False

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(self.timeout)
