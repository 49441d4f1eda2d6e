"""Idle allocations as an ingest stage: which GPUs are allocated but idle now (dashboard/usage/idle.py),
in Redis for the usage page and, priced, in every frame's summary as ``idle_allocated`` (the overview's KPI).

The usage rows themselves (seconds allocated and busy, energy) are not this
stage's: they ride the rollups' transaction (dashboard/rollups/usage.py), so
that they share its checkpoint.
"""

import time

from django.conf import settings

from dashboard.live.stages import Stage
from dashboard.usage.idle import IdleAllocations
from dashboard.usage.prices import Prices, current_prices
from gpulse.status import DOWN

# Prices change in the admin, rarely: read them this often.
PRICES_EVERY = 60.0


def idle_summary(idle_by_model: dict[str, float], price: Prices) -> dict:
    """The KPI "allocated but idle: N GPUs, $X/h" (an idle MIG instance: its share of a GPU, N to 2 decimals)."""
    return {"gpus": round(sum(idle_by_model.values()), 2),
            "usd_per_hour": sum(count * price.gpu_hour(model) for model, count in idle_by_model.items())}


class IdleStage(Stage):
    def __init__(self, core):
        super().__init__(core)
        # The one switch for usage (its rows ride the rollups). Off, the list stays empty (its first
        # write clears what an earlier ingest left) and the KPI shows a dash.
        self.accounting = settings.GPULSE_USAGE_ACCOUNTING
        self.idle = IdleAllocations()
        self.prices: Prices | None = None
        self.prices_read = 0.0  # time.monotonic()
        self.latest: dict = {"idle_allocated": None}

    def restore(self) -> None:
        """Resume the list the previous ingest wrote: a GPU still idle with the same owner keeps its "since"."""
        if self.accounting:
            self.idle.resume(self.core.redis.get(self.core.keys.idle_allocations))

    def sample(self, node, rows) -> None:
        if self.accounting:
            self.idle.update(node.name, node.sample, node.placed, rows)

    def tick(self, now, changed):
        nodes = self.core.state.nodes
        for name in changed:
            if nodes[name].status == DOWN:  # not idle "now": nobody knows
                self.idle.forget(name)
        return ()

    def summary(self) -> dict:
        return self.latest

    def write_redis(self, pipe) -> None:
        if self.idle.changed:
            pipe.set(self.core.keys.idle_allocations, self.idle.record())

    def write_database(self, now: float) -> None:
        if not self.accounting:
            return
        if self.prices is None or time.monotonic() - self.prices_read >= PRICES_EVERY:
            self.prices, self.prices_read = current_prices(), time.monotonic()
        self.latest = {"idle_allocated": idle_summary(self.idle.by_model(now), self.prices)}

    def forget(self, name: str, pipe) -> None:
        self.idle.forget(name)
