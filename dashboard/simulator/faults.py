"""Fault injection for the simulated fleet: the Redis hash its collectors read.

Field "<node>" (whole node) or "<node>/<gpu>", value = fault name (gpulse/faults.py);
"clear" removes the target's fields, and for a whole node also its GPUs' fields.
Only a node the cluster has seen (ingest's known-nodes hash) takes a fault: one
on a misspelt name would be listed as active while nothing happens. So does
only a fault that can apply to what the node last reported, whatever its
status: a GPU it has, NVLink on a GPU that has links, an InfiniBand port on
the node. Its latest sample says all three; once that has expired (the node is
down) its newest minute of rollups still names its GPUs, and the links and
ports, unknown, are not judged.
"""

from dashboard.live.models import GpuRollup
from dashboard.redis_client import redis_client
from gpulse import schema
from gpulse.faults import parse_fault
from gpulse.keys import Keys


class FaultRefused(ValueError):
    """The fault cannot be set; ``field`` is the form field it is about."""

    field = "node"


class UnknownNode(FaultRefused):
    """The cluster has never seen the named node."""


class NoSuchGpu(FaultRefused):
    """The node's latest sample has no GPU of that index."""

    field = "gpu"


class CannotApply(FaultRefused):
    """The fault does nothing to the target's hardware (NVLink down on a GPU without NVLink)."""

    field = "fault"


def _index_range(indexes: list[int]) -> str:
    """'GPUs 0-7', 'GPU 0' or 'GPUs 0, 2, 5'."""
    if len(indexes) == 1:
        return f"GPU {indexes[0]}"
    if indexes == list(range(indexes[0], indexes[-1] + 1)):
        return f"GPUs {indexes[0]}-{indexes[-1]}"
    return "GPUs " + ", ".join(map(str, indexes))


def check_applies(node: str, gpu: int | None, fault: str, gpus: list[dict], faulted: set[int],
                  ports: list[dict] | None = None) -> None:
    """Raise NoSuchGpu or CannotApply unless ``fault`` can apply to the target, judged by the node's
    last reported ``gpus`` and InfiniBand ``ports`` (None: not known); ``faulted``: its GPU indexes that
    carry a fault (a gpu_missing GPU is absent from the sample, and still the node's)."""
    indexes = sorted({reading["index"] for reading in gpus} | faulted)
    if gpu is not None and gpu not in indexes:
        has = f"{len(indexes)} GPU{'s' if len(indexes) != 1 else ''} ({_index_range(indexes)})" if indexes else "no GPU"
        raise NoSuchGpu(f"{node} has {has}: there is no GPU {gpu}")
    name = parse_fault(fault)[0]
    if name == "ib_down" and ports == []:  # None: a source that does not read the ports (then allowed)
        raise CannotApply(f"ib_down cannot apply to {node}: its latest sample shows no InfiniBand port")
    if name == "nvlink_down":
        # nvlink_links: 0 where the GPU has no NVLink, null where the source cannot tell (then allowed).
        targets = [reading for reading in gpus if gpu is None or reading["index"] == gpu]
        if targets and all(reading.get("nvlink_links") == 0 for reading in targets):
            model = targets[0].get("name") or "GPU"
            where = f"{node} GPU {gpu}" if gpu is not None else f"{node}'s GPUs"
            raise CannotApply(f"nvlink_down cannot apply to {where}: the {model} has no NVLink")


def _latest_sample(client, keys: Keys, node: str) -> dict | None:
    """The node's latest sample, whatever its status; None once it has expired, or when it is not valid."""
    raw = client.get(keys.node(node))
    try:
        return None if raw is None else schema.parse(raw)
    except schema.MalformedSample:
        return None


def _last_rolled_up_gpus(node: str) -> list[dict]:
    """The GPUs (``{"index": i}``) of the node's newest minute of rollups: what it had when it last reported
    (a lost GPU has none, and carries a fault); empty when it has none."""
    newest = GpuRollup.objects.filter(node=node).order_by("-minute").values_list("minute", flat=True).first()
    if newest is None:
        return []
    return [{"index": index} for index in GpuRollup.objects.filter(node=node, minute=newest)
            .values_list("gpu", flat=True)]


def set_fault(node: str, gpu: int | None, fault: str) -> list[str]:
    """Apply ``fault`` (or "clear") to the target; return the fields written or removed.

    Raise UnknownNode for a node the cluster has never seen, unless ``fault`` is
    "clear" and faults are left on it (a node ingest has since forgotten); NoSuchGpu
    or CannotApply for a fault that cannot apply (check_applies).
    """
    keys = Keys()
    key = keys.simulator_faults
    field = node if gpu is None else f"{node}/{gpu}"
    client = redis_client()
    known = client.hexists(keys.known_nodes, node)
    present = [f.decode() for f in client.hkeys(key)]
    if fault != "clear":
        if not known:
            raise UnknownNode(f"the cluster has never seen a node named {node!r}")
        faulted = {int(index) for f in present if f.startswith(f"{node}/") and (index := f.partition("/")[2]).isdigit()}
        # Judged whatever the node's status: a down node is still the hardware it last reported.
        sample = _latest_sample(client, keys, node)
        if sample is not None:
            check_applies(node, gpu, fault, sample["gpus"], faulted, sample.get("ib"))
        elif rolled_up := _last_rolled_up_gpus(node):
            check_applies(node, gpu, fault, rolled_up, faulted)
        client.hset(key, field, fault)
        return [field]
    if not known and not any(f == node or f.startswith(f"{node}/") for f in present):
        raise UnknownNode(f"the cluster has never seen a node named {node!r}")
    fields = [field]
    if gpu is None:
        fields += [f for f in present if f.startswith(f"{node}/")]
    client.hdel(key, *fields)
    return fields


def active_faults() -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis_client().hgetall(Keys().simulator_faults).items()}
