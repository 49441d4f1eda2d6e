"""How long a drain must wait so that gpulse never storms Slurm: a limit per node and one for the cluster.

gpulse drains one node at most once per GPULSE_DRAIN_NODE_INTERVAL, and at
most GPULSE_DRAIN_MAX_NODES_PER_HOUR nodes in any hour: a fault that shows on
every node at once (a bad driver roll-out, a fabric outage, a bug in a check)
must not empty the cluster, which is why NVSentinel and Slurm sites cap
automatic remediation. Counted from the drain records: each node's latest
``drained_at``, and drains of other nodes in flight (claimed, still pending)
as if done now, so two scheduler threads racing at the cap both wait rather
than both pass.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max

from dashboard.alerts.words import span
from dashboard.scheduler.models import DrainRecord

WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Wait:
    seconds: float
    why: str


def drain_wait(record: DrainRecord, now: datetime) -> Wait | None:
    """Return how long ``record``'s drain must wait and why, or None when it may run now."""
    interval = timedelta(seconds=settings.GPULSE_DRAIN_NODE_INTERVAL)
    drained = DrainRecord.objects.filter(drained_at__isnull=False).exclude(pk=record.pk)
    last = drained.filter(node=record.node).aggregate(last=Max("drained_at"))["last"]
    if last is not None and now - last < interval:
        return Wait((last + interval - now).total_seconds(),
                    f"gpulse drained {record.node} {span(int((now - last).total_seconds()))} ago, and drains a node "
                    f"at most once every {span(int(interval.total_seconds()))} (GPULSE_DRAIN_NODE_INTERVAL)")
    cap = settings.GPULSE_DRAIN_MAX_NODES_PER_HOUR
    others = {row["node"]: row["last"] for row in drained.filter(drained_at__gt=now - WINDOW)
              .exclude(node=record.node).values("node").annotate(last=Max("drained_at"))}
    in_flight = (DrainRecord.objects.filter(state=DrainRecord.PENDING).exclude(claim="")
                 .exclude(node=record.node).values_list("node", flat=True))
    for node in in_flight:
        others.setdefault(node, now)
    if len(others) < cap:
        return None
    # The cap frees once enough of those nodes' drains are an hour old.
    frees = sorted(others.values())[len(others) - cap] + WINDOW
    return Wait(max((frees - now).total_seconds(), 1.0),
                f"gpulse drained {len(others)} other nodes in the last hour, its cap "
                f"(GPULSE_DRAIN_MAX_NODES_PER_HOUR={cap})")
