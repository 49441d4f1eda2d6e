""""Kernels run, SMs idle" as an ingest stage: each GPU whose samples have met gpulse.activity's condition
for GPULSE_SM_IDLE_FOR seconds in a row carries frames.FLAG_SM_IDLE, which the overview tags "SM IDLE".

Time is the samples' own (where ingest placed them), so a burst of late samples counts what they
cover, and a GPU whose SM activity is unknown is never flagged.
"""

import orjson
from django.conf import settings

from dashboard.live.frames import FLAG_SM_IDLE
from dashboard.live.stages import Stage
from gpulse.activity import kernels_run_sms_idle
from gpulse.status import DOWN


class SmIdleStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        self.idle_for = settings.GPULSE_SM_IDLE_FOR
        self.since: dict[str, dict[int, float]] = {}  # node -> GPU index -> when its condition began
        self.flagged: dict[str, dict[int, int]] = {}  # node -> GPU index -> FLAG_SM_IDLE, the flagged ones only

    def sample(self, node, rows) -> None:
        now, before = node.placed, self.since.get(node.name, {})
        since = {gpu["index"]: before.get(gpu["index"], now)
                 for gpu in node.sample["gpus"] if kernels_run_sms_idle(gpu)}
        flagged = {index: FLAG_SM_IDLE for index, began in since.items() if now - began >= self.idle_for}
        self._keep(node.name, since, flagged)

    def tick(self, now, changed):
        for name in changed:
            if self.core.state.nodes[name].status == DOWN:  # its GPUs' state now is unknown
                self._keep(name, {}, {})
        return ()

    def gpu_flags(self) -> dict[str, dict[int, int]]:
        return self.flagged

    def write_redis(self, pipe) -> None:
        # For the node page (NodeConsumer): the flagged GPUs only, so small whatever the fleet's size.
        flagged = {name: sorted(gpus) for name, gpus in self.flagged.items()}
        pipe.set(self.core.keys.sm_idle, orjson.dumps(flagged), ex=60)

    def forget(self, name: str, pipe) -> None:
        self._keep(name, {}, {})

    def _keep(self, name: str, since: dict[int, float], flagged: dict[int, int]) -> None:
        # Only nodes with a GPU in the condition are kept: a fleet's worth of empty entries would cost each frame.
        if since:
            self.since[name] = since
        else:
            self.since.pop(name, None)
        if flagged:
            self.flagged[name] = flagged
        else:
            self.flagged.pop(name, None)
