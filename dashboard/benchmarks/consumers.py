"""/ws/benchmarks/<id>/: a job's progress rows as they arrive, then its final state."""

import asyncio
import logging

import orjson
import redis

from dashboard.live.consumers import FollowingConsumer
from dashboard.redis_client import async_redis_client
from gpulse.keys import Keys

log = logging.getLogger(__name__)


class JobConsumer(FollowingConsumer):
    async def follow(self):
        stream = Keys().job_events(int(self.scope["url_route"]["kwargs"]["pk"]))
        after = "0-0"
        while True:
            try:
                # Block for less than the client's 5 s socket timeout, or a quiet
                # queued job would end the follow with a timeout error.
                reply = await async_redis_client().xread({stream: after}, block=2000, count=1000)
            except redis.RedisError as exc:
                log.warning("job events unreadable, retrying: %s", exc)
                await asyncio.sleep(1)
                continue
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    after = entry_id
                    await self.send(text_data=fields[b"e"].decode())
                    if orjson.loads(fields[b"e"])["kind"] == "final":
                        await self.close()
                        return
