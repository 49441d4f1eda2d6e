"""Websockets: the whole cluster (/ws/cluster/) and one node (/ws/nodes/<name>/)."""

import asyncio
import logging
import time

import orjson
from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.accounts.websocket import SocketPlace
from dashboard.live.publish import CLUSTER_GROUP
from dashboard.live.state import remembered_or_none
from dashboard.redis_client import async_redis_client
from gpulse.keys import Keys
from gpulse.status import DOWN, node_status

log = logging.getLogger(__name__)

# Close codes in the 4000 range are ours; browsers show them in the console.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_MANY_SOCKETS = 4429
EMPTY_SNAPSHOT = orjson.dumps({"type": "snapshot", "seq": 0, "nodes": {}, "summary": {}}).decode()


def sm_idle_gpus(raw: bytes | None, node: str) -> list[int]:
    """The node's GPUs ingest flags "kernels run, SMs idle" (keys.sm_idle, dashboard/activity/stage.py).
    A value of another shape flags nothing rather than fail the read, which would show the node as
    Redis being unreachable."""
    try:
        flagged = orjson.loads(raw).get(node, []) if raw else []
    except (orjson.JSONDecodeError, AttributeError):
        return []
    if not isinstance(flagged, list):
        return []
    return [index for index in flagged if type(index) is int and index >= 0]


class AuthenticatedConsumer(AsyncWebsocketConsumer):
    """A logged-in user's socket, one of at most GPULSE_WS_MAX_PER_USER."""

    place: SocketPlace | None = None

    async def connect(self):
        user = self.scope["user"]
        if not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        place = SocketPlace(async_redis_client(), user.pk)
        if not await place.claim():
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        self.place = place
        await self.start()

    async def start(self):
        raise NotImplementedError

    async def disconnect(self, code):
        if self.place is not None:
            await self.place.release()


class FollowingConsumer(AuthenticatedConsumer):
    """Run follow() for as long as the socket is open."""

    async def start(self):
        await self.accept()
        self.task = asyncio.create_task(self.follow())

    async def disconnect(self, code):
        task = getattr(self, "task", None)
        if task:
            task.cancel()
        await super().disconnect(code)

    async def follow(self):
        raise NotImplementedError


class ClusterConsumer(AuthenticatedConsumer):
    """Send the snapshot on connect, then relay ingest's one delta frame per tick."""

    async def start(self):
        await self.channel_layer.group_add(CLUSTER_GROUP, self.channel_name)
        await self.accept()
        # Joined before reading the snapshot: a delta that overtakes it carries a
        # seq the browser compares, so nothing between the two is lost.
        try:
            snapshot = await async_redis_client().get(Keys().snapshot)
        except Exception as exc:
            log.warning("no snapshot for a new browser: %s", exc)
            snapshot = None
        await self.send(text_data=snapshot.decode() if snapshot else EMPTY_SNAPSHOT)

    async def disconnect(self, code):
        await self.channel_layer.group_discard(CLUSTER_GROUP, self.channel_name)
        await super().disconnect(code)

    async def cluster_frame(self, event):
        await self.send(text_data=event["text"])


class NodeConsumer(FollowingConsumer):
    """Send the node's full latest sample (processes included) whenever it changes."""

    poll_seconds = 0.5

    async def follow(self):
        self.node = self.scope["url_route"]["kwargs"]["name"]
        keys = Keys()
        last = None
        while True:
            try:
                client = async_redis_client()
                raw = await client.get(keys.node(self.node))
                seen = await client.hget(keys.known_nodes, self.node)
                message = self.describe(raw, remembered_or_none(seen))
                message["sm_idle_gpus"] = sm_idle_gpus(await client.get(keys.sm_idle), self.node)
            except Exception as exc:
                message = {"type": "node", "node": self.node, "status": "unknown", "error": f"Redis unreachable: {exc}"}
            fingerprint = (message.get("status"), message.get("ts"), message.get("clock_skew"), message.get("restarts"),
                           message.get("twin_collectors"), tuple(message.get("sm_idle_gpus", ())))
            if fingerprint != last:
                last = fingerprint
                await self.send(text_data=orjson.dumps(message).decode())
            await asyncio.sleep(self.poll_seconds)

    def describe(self, raw: bytes | None, seen: dict | None) -> dict:
        """The node's status, judged as dashboard.live.cluster.node_view judges it (by when its newest sample
        arrived, never by its own clock), and its full sample while it is not down; ``ts``
        places that sample in time (its arrival while the node's clock is skewed)."""
        seen = seen or {}
        message = {"type": "node", "node": self.node, "status": DOWN, "ts": seen.get("ts"), "sample": None,
                   "clock_skew": seen.get("skew"), "restarts": seen.get("restarts", 0),
                   "twin_collectors": seen.get("twin")}
        if raw is None:
            return message
        sample = orjson.loads(raw)
        # Its key exists, so it arrived within the key's lifetime; before ingest recorded it, judge by ts.
        message["status"] = node_status(seen.get("arrived", sample["ts"]), sample["interval"], time.time())
        if message["clock_skew"] is None:
            message["ts"] = sample["ts"]
        if message["status"] != DOWN:
            message["sample"] = sample
        return message
