"""/ws/benchmarks/<id>/: a job's progress rows as they arrive, then its final state."""

import asyncio
import logging

import orjson
import redis

from dashboard.benchmarks.models import BenchmarkJob
from dashboard.nodes.consumers import FollowingConsumer
from dashboard.redis_client import async_redis_client
from gpulse import job_events
from gpulse.keys import Keys

log = logging.getLogger(__name__)


class JobConsumer(FollowingConsumer):
    async def follow(self):
        job_id = int(self.scope["url_route"]["kwargs"]["pk"])
        keys = Keys()
        # The control stream (its `final`) and the rows of the job's first node (rank 0), from
        # that node's own stream: no other node's word reaches the page.
        nodes = await BenchmarkJob.objects.filter(pk=job_id).values_list("nodes", flat=True).afirst() or []
        streams = job_events.streams(keys, job_id, nodes[:1])
        after = dict.fromkeys(streams, "0-0")
        while True:
            try:
                # Block for less than the client's 5 s socket timeout, or a quiet
                # queued job would end the follow with a timeout error.
                reply = await async_redis_client().xread(after, block=2000, count=1000)
            except redis.RedisError as exc:
                log.warning("job events unreadable, retrying: %s", exc)
                await asyncio.sleep(1)
                continue
            for key, entries in reply or ():
                key = key.decode() if isinstance(key, bytes) else key
                for entry_id, fields in entries:
                    after[key] = entry_id
                    event = job_events.decode(fields)
                    if event is None or (streams[key] is not None and event["kind"] != "row"):
                        continue
                    await self.send(text_data=orjson.dumps(event).decode())
                    if event["kind"] == "final":
                        await self.close()
                        return
