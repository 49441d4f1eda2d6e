"""/ws/benchmarks/<id>/: a job's progress rows as they arrive, then its final state."""

import orjson

from dashboard.live.consumers import FollowingConsumer
from dashboard.live.redis_async import get_client
from gpulse.keys import Keys


class JobConsumer(FollowingConsumer):
    async def follow(self):
        stream = Keys().job_events(int(self.scope["url_route"]["kwargs"]["pk"]))
        after = "0-0"
        while True:
            reply = await get_client().xread({stream: after}, block=5000, count=1000)
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    after = entry_id
                    await self.send(text_data=fields[b"e"].decode())
                    if orjson.loads(fields[b"e"])["kind"] == "final":
                        await self.close()
                        return
