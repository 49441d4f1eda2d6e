"""MIG instances in the browsers' frames (issue 36): a GPU in MIG mode gets its instances' rows in the node's
``mig`` part, a GPU without MIG adds nothing to a frame, and what an instance sends is bounded by the contract."""

import time

import orjson

from dashboard.live.frames import FLAG_ALLOCATED, FLAG_IDLE, MIG_FIELDS, FrameBuilder, mig_rows
from dashboard.live.state import ClusterState, NodeState
from gpulse import schema
from tests.samples import sample
from tests.test_ingest import frames, make_ingest, xadd  # noqa: F401 (fixtures)

GIB = 1024**3


def instance(gi: int, profile: str | None = "1g.10gb", ci: int | None = 0, sm_active: float | None = 0.5,
             **overrides) -> dict:
    reading = {"gpu_instance": gi, "compute_instance": ci, "profile": profile, "uuid": f"MIG-{gi:04d}",
               "mem_used": 2 * GIB, "mem_total": 10 * GIB, "sm_active": sm_active, "processes": []}
    reading.update(overrides)
    return reading


def mig_sample(node: str, instances: dict[int, list]) -> dict:
    """A node of 2 GPUs; GPU g in MIG mode with ``instances[g]`` where given (its util null, as NVML's)."""
    s = sample(node, gpus=2)
    for g, listed in instances.items():
        s["gpus"][g].update(mig_enabled=True, mig=listed, util=None)
    return s


def framed(*samples: dict) -> dict:
    """The snapshot of a FrameBuilder that was given ``samples``: its nodes' entries."""
    builder, state = FrameBuilder(), ClusterState()
    for s in samples:
        node = state.nodes[s["node"]] = NodeState(s["node"], s, arrived=s["ts"], placed=s["ts"])
        builder.update(node)
    _, snapshot = builder.frames(state, {s["node"] for s in samples}, [], {}, lambda name: {}, {})
    return orjson.loads(snapshot)["nodes"]


def test_a_mig_gpu_gets_a_row_per_instance_and_its_node_entry_says_which_gpu():
    held = instance(2, "3g.40gb", sm_active=0.02, processes=[{"pid": 7, "user": "ana"}], mem_total=40 * GIB)
    nodes = framed(mig_sample("mig-01", {1: [instance(1, sm_active=0.61), held]}))
    rows = nodes["mig-01"]["mig"]
    assert list(rows) == ["1"]  # GPU 0 has no MIG: nothing of it in the part
    by_field = [dict(zip(MIG_FIELDS, row, strict=True)) for row in rows["1"]]
    assert by_field[0] == {"gpu_instance": 1, "compute_instance": 0, "profile": "1g.10gb", "slices": 1,
                           "sm_active": 61, "mem_used": 2048, "mem_total": 10240, "flags": 0}
    assert by_field[1]["slices"] == 3 and by_field[1]["mem_total"] == 40960
    assert by_field[1]["flags"] == FLAG_ALLOCATED | FLAG_IDLE  # held, SMs at 2 %: idle


def test_an_entry_without_mig_is_unchanged():
    plain = sample("plain-01", gpus=8)
    assert "mig" not in framed(plain)["plain-01"]
    # MIG on without an instance made: the GPU is named, with no rows.
    assert framed(mig_sample("mig-02", {0: []}))["mig-02"]["mig"] == {"0": []}


def test_a_node_that_turns_mig_off_loses_its_part_and_a_down_node_has_none():
    builder, state = FrameBuilder(), ClusterState()
    s = mig_sample("mig-03", {0: [instance(1)]})
    node = state.nodes["mig-03"] = NodeState("mig-03", s, arrived=s["ts"], placed=s["ts"])
    builder.update(node)
    delta, _ = builder.frames(state, {"mig-03"}, [], {}, lambda name: {}, {})
    assert "mig" in orjson.loads(delta)["nodes"]["mig-03"]
    node.status = "down"
    delta, _ = builder.frames(state, set(), ["mig-03"], {}, lambda name: {}, {})
    assert "mig" not in orjson.loads(delta)["nodes"]["mig-03"]
    node.status = "up"
    node.sample = sample("mig-03", gpus=2, ts=time.time())
    builder.update(node)
    delta, _ = builder.frames(state, {"mig-03"}, [], {}, lambda name: {}, {})
    assert "mig" not in orjson.loads(delta)["nodes"]["mig-03"]


def test_compute_instances_count_their_compute_slices_and_unknown_profiles_none():
    rows = mig_rows([instance(1, "1c.3g.40gb", ci=0), instance(1, "1c.3g.40gb", ci=1), instance(2, "7g.80gb"),
                     instance(3, None), instance(4, "custom"), instance(5, "1g.10gb+me", sm_active=None,
                                                                        k8s={"pod": "p"})])
    assert [row[MIG_FIELDS.index("slices")] for row in rows] == [1, 1, 7, None, None, 1]
    # Held without SM activity: allocated, no idle verdict (an instance has no utilization).
    assert rows[-1][MIG_FIELDS.index("flags")] == FLAG_ALLOCATED
    assert rows[-1][MIG_FIELDS.index("sm_active")] is None


def test_instances_reach_the_frame_through_ingest_bounded_by_the_contract(redis_client, make_ingest, frames):  # noqa: F811
    ingest = make_ingest()
    ok = mig_sample("mig-04", {0: [instance(gi) for gi in range(schema.MAX_MIG_INSTANCES)]})
    hostile = mig_sample("mig-05", {0: [instance(gi) for gi in range(schema.MAX_MIG_INSTANCES + 1)],
                                    1: [instance(1, "<img src=x onerror=alert(1)>")]})
    for s in (ok, hostile):
        xadd(redis_client, orjson.dumps(s))
    ingest.read(block_ms=10)
    ingest.emit(time.time())
    nodes = frames[-1]["nodes"]
    assert len(nodes["mig-04"]["mig"]["0"]) == schema.MAX_MIG_INSTANCES
    # Too many instances, a profile that is markup: each list is dropped, the GPUs and the sample stand.
    assert "mig" not in nodes["mig-05"] and len(nodes["mig-05"]["gpus"]) == 2
