"""A GPU node reaches only its own data: attacks run as a collector's own ACL user against a real Redis,
read by a real ingest as its user. Who a sample is from is the stream its node's credential wrote, never
the sample's ``node`` field."""

import time

import orjson
import pytest
from redis.exceptions import NoPermissionError, ResponseError

from collectors.publisher import RedisPublisher
from dashboard.alerts.evaluate import AlertEvaluator
from dashboard.alerts.models import Alert, Rule
from dashboard.live.ingest import Ingest
from dashboard.scheduler.models import DrainRecord
from gpulse import schema
from gpulse.keys import TELEMETRY_MAXLEN, Keys
from tests.ingest_stages import with_alerts
from tests.samples import sample
from tests.test_redis_acl import acl, acl_redis, acl_server  # noqa: F401 (fixtures)

KEYS = Keys()


@pytest.fixture
def roles(acl):  # noqa: F811 (test_redis_acl's server with every role's user, emptied for each test)
    return acl


# The drain rule is recorded in the evaluator's transaction; nothing here runs scontrol.
pytestmark = pytest.mark.django_db


@pytest.fixture
def xid_drain_rule(settings):
    settings.GPULSE_SLURM_DRAIN = True
    Rule.objects.all().delete()
    return Rule.objects.create(name="fallen off the bus", metric="gpu.xid", comparison=">", threshold=0,
                               for_seconds=0, severity="critical", drain=True)


def xid79(node: str) -> dict:
    return sample(node, gpus=2, xid=[79])


def ingest_as_its_user(roles) -> Ingest:
    ingest = Ingest(roles.client("ingest"), lambda frame: True,
                    stages=with_alerts(AlertEvaluator(reload_every=0)), discover_every=0.0)
    ingest.ensure_group()
    return ingest


def run_one_tick(ingest: Ingest) -> None:
    ingest.read(block_ms=10)
    ingest.emit(time.time())


def test_a_sample_naming_another_node_in_its_own_stream_is_refused_counted_and_never_drains_it(roles,
                                                                                            xid_drain_rule):
    node = roles.client("node-gpu-01")
    # The attack of issue 31: Xid 79 on every GPU of gpu-02, and of a node never monitored, sent with gpu-01's
    # credential. Its own stream is the only place it can write.
    for victim in ("gpu-02", "login01"):
        node.xadd(KEYS.telemetry_stream("gpu-01"), {"s": schema.encode(xid79(victim))})
    ingest = ingest_as_its_user(roles)
    run_one_tick(ingest)
    assert ingest.forged == 2 and ingest.rejected == 2
    assert set(ingest.state.nodes) == set()
    assert not Alert.objects.exists() and not DrainRecord.objects.exists()
    beat = orjson.loads(roles.admin.get(KEYS.ingest_heartbeat))
    assert beat["forged"] == 2

    # The same fault reported by gpu-01 itself, with its own credential, does drain gpu-01: the rule works.
    publisher = RedisPublisher(roles.url("node-gpu-01"), KEYS)
    publisher.publish([xid79("gpu-01")])
    publisher.close()
    run_one_tick(ingest)
    assert set(ingest.state.nodes) == {"gpu-01"}
    assert set(DrainRecord.objects.values_list("node", flat=True)) == {"gpu-01"}
    assert set(Alert.objects.values_list("node", flat=True)) == {"gpu-01"}


def test_a_node_cannot_trim_another_nodes_stream_and_trimming_its_own_loses_only_its_own(roles):
    RedisPublisher(roles.url("node-gpu-02"), KEYS).publish([sample("gpu-02") for _ in range(5)])
    node = roles.client("node-gpu-01")
    with pytest.raises(NoPermissionError):
        node.xadd(KEYS.telemetry_stream("gpu-02"), {"s": b"{}"}, maxlen=0)
    with pytest.raises(NoPermissionError):
        node.xadd(KEYS.probe_stream("gpu-02"), {"p": b"{}"}, maxlen=0)
    node.xadd(KEYS.telemetry_stream("gpu-01"), {"s": schema.encode(sample("gpu-01"))}, maxlen=0)
    assert roles.admin.xlen(KEYS.telemetry_stream("gpu-02")) == 5
    assert roles.admin.xlen(KEYS.telemetry_stream("gpu-01")) == 0


def test_an_entry_over_the_contracts_size_is_refused_and_counted_and_the_stream_is_held_to_its_cap(roles):
    node = roles.client("node-gpu-01")
    # Stored by Redis (its own stream is the node's to fill), refused by ingest: over 1 MiB.
    node.xadd(KEYS.telemetry_stream("gpu-01"), {"s": b"x" * (8 << 20)})
    # And a node leaving the cap out of its XADDs: ingest trims its stream as it reads.
    for _ in range(TELEMETRY_MAXLEN * 3):
        node.xadd(KEYS.telemetry_stream("gpu-01"), {"s": schema.encode(sample("gpu-01"))})
    ingest = ingest_as_its_user(roles)
    while ingest.read(block_ms=10):
        pass
    ingest.emit(time.time())
    assert ingest.rejected == 1 and ingest.forged == 0
    assert "gpu-01" in ingest.state.nodes
    # MAXLEN ~ trims whole stream nodes (100 entries each), so a little more may remain.
    assert roles.admin.xlen(KEYS.telemetry_stream("gpu-01")) <= TELEMETRY_MAXLEN + 100


def test_a_node_cannot_make_up_a_node_or_read_another_nodes_data(roles):
    node = roles.client("node-gpu-01")
    for attempt in (lambda: node.xadd(KEYS.telemetry_stream("login01"), {"s": b"{}"}),
                    lambda: node.set(KEYS.node("login01"), b"{}"),
                    lambda: node.xrange(KEYS.telemetry_stream("gpu-02")),
                    lambda: node.delete(KEYS.telemetry_stream("gpu-01"))):
        with pytest.raises(NoPermissionError):
            attempt()


def test_ingest_leaves_a_key_that_only_looks_like_a_stream_alone(roles):
    # A stream key whose name is not a node's (Redis keys may hold any byte): never taken for a node.
    roles.admin.xadd(KEYS.telemetry_stream("a b"), {"s": schema.encode(sample("gpu-01"))})
    roles.admin.set(KEYS.telemetry_stream("gpu-09"), b"not a stream")
    ingest = ingest_as_its_user(roles)
    run_one_tick(ingest)
    assert ingest.streams == {} and ingest.state.nodes == {}
    with pytest.raises(ResponseError):
        roles.admin.xinfo_groups(KEYS.telemetry_stream("gpu-09"))
