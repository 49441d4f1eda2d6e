"""Remote write (dashboard/longterm): the cluster's series, as /metrics names them, sent from a real ingest to a
real VictoriaMetrics and read back through PromQL; an outage of the store within the buffer loses nothing; a
full buffer drops the oldest and counts them; a bad URL or a store that is down never stops ingest."""

import itertools
import time
import urllib.parse

import cramjam
import orjson
import pytest
from django.test import override_settings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from dashboard.live.ingest import Ingest
from dashboard.longterm.encoding import LabelCache, encode_round, exported_families
from dashboard.longterm.stage import RemoteWriteStage, writer_from_settings
from dashboard.longterm.store import parse_store_url
from dashboard.longterm.writer import RemoteWriter
from devtools.redis_server import free_port
from gpulse import schema
from tests.clock import Clock
from tests.samples import sample, stream_of
from tests.victoria_metrics import needs_victoria_metrics, victoria_metrics  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

INTERVAL = 15


def write_request_class():
    """prometheus/prompb's WriteRequest, TimeSeries, Label and Sample, for the real protobuf library to decode."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="gpulse_test_prompb.proto", package="prometheus", syntax="proto3")
    messages = {
        "Label": [("name", 1, field.TYPE_STRING, None, False), ("value", 2, field.TYPE_STRING, None, False)],
        "Sample": [("value", 1, field.TYPE_DOUBLE, None, False), ("timestamp", 2, field.TYPE_INT64, None, False)],
        "TimeSeries": [("labels", 1, field.TYPE_MESSAGE, ".prometheus.Label", True),
                       ("samples", 2, field.TYPE_MESSAGE, ".prometheus.Sample", True)],
        "WriteRequest": [("timeseries", 1, field.TYPE_MESSAGE, ".prometheus.TimeSeries", True)],
    }
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            added = message.field.add(name=field_name, number=number, type=kind,
                                      label=field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL)
            if type_name:
                added.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("prometheus.WriteRequest"))


def node_dict(name: str, **overrides) -> dict:
    """A node as the stage hands it over (and as /metrics reads it)."""
    return {"node": name, "status": "up", "ts": time.time(), "gpus": sample(name, gpus=2, **overrides)["gpus"],
            "twin_collectors": None}


def decoded(batches) -> list[tuple[dict, float, int]]:
    request_class = write_request_class()
    series = []
    for batch in batches:
        request = request_class.FromString(bytes(cramjam.snappy.decompress_raw(batch.body)))
        for each in request.timeseries:
            names = [label.name for label in each.labels]
            assert names == sorted(names)  # the protocol wants them sorted
            assert len(each.samples) == 1
            series.append(({label.name: label.value for label in each.labels}, each.samples[0].value,
                           each.samples[0].timestamp))
    assert sum(batch.samples for batch in batches) == len(series)
    return series


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)
    return result


def test_a_round_is_the_metrics_series_and_the_real_protobuf_library_reads_it():
    nodes = [node_dict("n1", util=37), node_dict("n2"), {**node_dict("gone"), "status": "down"}]
    cache = LabelCache()
    timestamp = 1_790_000_000_000
    batches = encode_round(nodes, timestamp, cache, batch_series=7)
    series = decoded(batches)
    expected = [({"__name__": s.name, **{k: v for k, v in s.labels.items() if v}}, s.value)
                for s in (sample for family in exported_families(nodes) for sample in family.samples)]
    assert [(labels, value) for labels, value, _ in series] == expected
    assert {at for _, _, at in series} == {timestamp}
    assert len(batches) == -(-len(expected) // 7)
    util = {labels["node"]: value for labels, value, _ in series
            if labels["__name__"] == "gpulse_gpu_utilization_ratio" and labels["gpu"] == "0"}
    assert util == {"n1": 0.37, "n2": 0.5}  # the down node exports no GPU gauge, as on /metrics
    assert ({"__name__": "gpulse_node_up", "node": "gone"}, 0.0, timestamp) in series
    # The next round reuses the labels encoded, and decodes the same but for its time (and last sample times).
    again = decoded(encode_round([node_dict("n1", util=37), node_dict("n2"), nodes[2]], timestamp + 15_000, cache,
                                 batch_series=7))
    assert [(labels, value) for labels, value, _ in again
            if not labels["__name__"].startswith("gpulse_node_last")] == [
        (labels, value) for labels, value, _ in series if not labels["__name__"].startswith("gpulse_node_last")]
    assert {at for _, _, at in again} == {timestamp + 15_000}


@pytest.mark.parametrize(("url", "says"), [
    ("ftp://store/api/v1/write", "http or https"),
    ("http:///api/v1/write", "no host"),
    ("http://user:secret@store/api/v1/write", "must not carry credentials"),
    ("http://store:99999/api/v1/write", "not a URL"),
])
def test_a_url_it_cannot_use_is_refused_with_the_reason(url, says):
    with pytest.raises(ValueError, match=says) as raised:
        parse_store_url(url, "GPULSE_REMOTE_WRITE_URL")
    assert "GPULSE_REMOTE_WRITE_URL" in str(raised.value) and "secret" not in str(raised.value)


@pytest.fixture
def make_ingest(redis_client):
    frames = []

    def make(writer=None, clock=None):
        return Ingest(redis_client, lambda frame: frames.append(orjson.loads(frame)) or True,
                      clock=clock or time.time, discover_every=0.0,
                      stages=[lambda core: RemoteWriteStage(core, writer)])

    make.frames = frames
    return make


ENTRY_SEQ = itertools.count()


def send_samples(redis_client, ingest, at: float, names=("rw-1", "rw-2"), **overrides) -> None:
    """Two nodes' samples reach ingest, and it sends a frame (and a round, when one is due) at ``at``."""
    for name in names:
        raw = schema.encode(sample(name, gpus=2, ts=at, **overrides))
        redis_client.xadd(stream_of(raw), {"s": raw}, id=f"{int(at * 1000)}-{next(ENTRY_SEQ)}")
    ingest.read(block_ms=10)
    ingest.emit(at)


def raw_samples(victoria_metrics, match: str) -> dict[tuple, dict[int, float]]:  # noqa: F811
    return {(series["metric"]["node"], series["metric"].get("gpu")): dict(zip(series["timestamps"], series["values"],
                                                                            strict=True))
            for series in victoria_metrics.export(match)}


@needs_victoria_metrics
def test_ingest_writes_the_cluster_and_promql_reads_the_same_values_back(redis_client, make_ingest,
                                                                         victoria_metrics):  # noqa: F811
    with override_settings(GPULSE_REMOTE_WRITE_URL=victoria_metrics.write_url, GPULSE_REMOTE_WRITE_INTERVAL=INTERVAL):
        writer = writer_from_settings()
    ingest = make_ingest(writer)
    try:
        start = (time.time() // INTERVAL - 4) * INTERVAL  # recent, on the grid
        for n, util in enumerate((20, 40)):
            send_samples(redis_client, ingest, start + n * INTERVAL, util=util, temp=50 + n)
        wait_for(lambda: writer.stats()["sent"] and not writer.stats()["buffered_samples"], "the rounds to be sent")
    finally:
        writer.stop()
    stats = writer.stats()
    assert stats["failed"] == stats["dropped"] == stats["rejected"] == 0 and stats["error"] is None
    first, second = int(start * 1000), int((start + INTERVAL) * 1000)
    util = raw_samples(victoria_metrics, 'gpulse_gpu_utilization_ratio{node=~"rw-.*"}')
    assert util == {(node, gpu): {first: 0.2, second: 0.4} for node in ("rw-1", "rw-2") for gpu in ("0", "1")}
    # Through PromQL, with /metrics' labels and units.
    result = victoria_metrics.query_range('gpulse_gpu_temperature_celsius{node="rw-1",gpu="0"}', start,
                                          start + INTERVAL, INTERVAL)
    assert len(result) == 1
    assert result[0]["metric"] == {"__name__": "gpulse_gpu_temperature_celsius", "node": "rw-1", "gpu": "0",
                                   "uuid": "GPU-00000000", "model": "NVIDIA H100 80GB HBM3"}
    assert [float(value) for _, value in result[0]["values"]] == [50.0, 51.0]
    up = raw_samples(victoria_metrics, 'gpulse_node_up{node=~"rw-.*"}')
    assert up == {("rw-1", None): {first: 1, second: 1}, ("rw-2", None): {first: 1, second: 1}}


OUTAGE_NODES = ("out-1", "out-2")


@needs_victoria_metrics
def test_an_outage_of_the_store_within_the_buffer_loses_nothing(redis_client, make_ingest,
                                                                victoria_metrics):  # noqa: F811
    writer = RemoteWriter(parse_store_url(victoria_metrics.write_url, "url"), headers={}, timeout=2,
                          max_samples=100_000, backoff_base=0.05, backoff_max=0.5)
    start = (time.time() // INTERVAL - 20) * INTERVAL
    clock = Clock(start)
    ingest = make_ingest(writer, clock)
    rounds = [start + n * INTERVAL for n in range(6)]
    try:
        clock.now = rounds[0]
        send_samples(redis_client, ingest, rounds[0], OUTAGE_NODES, util=10, power=100)
        wait_for(lambda: writer.stats()["sent"] and not writer.stats()["buffered_samples"], "the first round sent")
        victoria_metrics.stop()
        for n, at in enumerate(rounds[1:5], start=1):  # ingest goes on while the store is away
            clock.now = at
            send_samples(redis_client, ingest, at, OUTAGE_NODES, util=10 * (n + 1), power=100 + n)
            assert len(make_ingest.frames) == n + 1
        wait_for(lambda: writer.stats()["failed"], "a failed attempt")
        assert writer.stats()["buffered_samples"] and writer.stats()["error"]
        victoria_metrics.start()
        clock.now = rounds[5]
        send_samples(redis_client, ingest, rounds[5], OUTAGE_NODES, util=60, power=105)
        wait_for(lambda: not writer.stats()["buffered_samples"], "the buffer to drain once the store is back")
    finally:
        writer.stop()
        if victoria_metrics.process is None:
            victoria_metrics.start()
    assert writer.stats()["dropped"] == writer.stats()["rejected"] == 0
    util = raw_samples(victoria_metrics, 'gpulse_gpu_utilization_ratio{node="out-1",gpu="1"}')
    assert util == {("out-1", "1"): {int(at * 1000): (n + 1) / 10 for n, at in enumerate(rounds)}}
    power = raw_samples(victoria_metrics, 'gpulse_gpu_power_watts{node="out-2",gpu="0"}')
    assert power == {("out-2", "0"): {int(at * 1000): 100.0 + n for n, at in enumerate(rounds)}}


def test_a_full_buffer_drops_the_oldest_counted_on_metrics_and_ingest_goes_on(redis_client, make_ingest, client,
                                                                              viewer_user):
    down = f"http://127.0.0.1:{free_port()}/api/v1/write"  # nothing listens there
    writer = RemoteWriter(parse_store_url(down, "url"), headers={}, timeout=1, max_samples=150, backoff_base=30)
    start = time.time() // INTERVAL * INTERVAL - 10 * INTERVAL
    clock = Clock(start)
    ingest = make_ingest(writer, clock)
    try:
        for n in range(4):
            clock.now = start + n * INTERVAL
            send_samples(redis_client, ingest, clock.now)
        wait_for(lambda: writer.stats()["dropped"] and not writer.rounds, "a full buffer")
    finally:
        writer.stop()
    stats = writer.stats()
    assert len(make_ingest.frames) == 4  # every frame went out
    assert 0 < stats["buffered_samples"] <= 150 and stats["failed"] and stats["sent"] == 0
    assert "Connection" in stats["error"]
    clock.now += INTERVAL
    ingest.emit(clock.now)  # its heartbeat, which /metrics reads
    client.force_login(viewer_user)
    text = client.get("/metrics").content.decode()
    counted = writer.stats()
    for outcome in ("sent", "failed", "dropped"):
        assert f'gpulse_remote_write_samples_total{{outcome="{outcome}"}} {float(counted[outcome])}' in text
    assert f"gpulse_remote_write_buffered_samples {float(counted['buffered_samples'])}" in text


@needs_victoria_metrics
def test_a_batch_the_store_refuses_is_dropped_as_rejected(redis_client, make_ingest, victoria_metrics):  # noqa: F811
    wrong = urllib.parse.urljoin(victoria_metrics.base, "/api/v1/not-the-write-path")
    writer = RemoteWriter(parse_store_url(wrong, "url"), headers={}, timeout=5, max_samples=10_000)
    ingest = make_ingest(writer)
    try:
        send_samples(redis_client, ingest, time.time())
        wait_for(lambda: writer.stats()["rejected"], "the store's refusal")
    finally:
        writer.stop()
    assert writer.stats()["sent"] == writer.stats()["failed"] == 0
    assert writer.stats()["error"].startswith("HTTP 4")


@needs_victoria_metrics
def test_a_request_that_cannot_be_made_is_retried_and_said_not_fatal(redis_client, make_ingest,
                                                                      victoria_metrics):  # noqa: F811
    # A tenant from the environment with a newline in it: http.client refuses the header.
    writer = RemoteWriter(parse_store_url(victoria_metrics.write_url, "url"), headers={"X-Scope-OrgID": "a\nb"},
                          timeout=5, max_samples=10_000, backoff_base=0.05)
    ingest = make_ingest(writer)
    try:
        send_samples(redis_client, ingest, time.time())
        wait_for(lambda: writer.stats()["failed"], "a failed attempt")
        assert writer.thread.is_alive() and "Invalid header" in writer.stats()["error"]
    finally:
        writer.stop()


def test_a_url_it_cannot_use_leaves_ingest_running_and_says_why(redis_client, make_ingest, caplog):
    with override_settings(GPULSE_REMOTE_WRITE_URL="ftp://store/api/v1/write"):
        ingest = make_ingest()
    send_samples(redis_client, ingest, time.time())
    assert len(make_ingest.frames) == 1
    beat = ingest.heartbeat(time.time())
    assert "GPULSE_REMOTE_WRITE_URL must be an http or https URL" in beat["remote_write"]["error"]
    assert "remote write is off" in caplog.text


def test_without_a_url_the_stage_does_nothing(redis_client, make_ingest):
    ingest = make_ingest()
    send_samples(redis_client, ingest, time.time())
    stage = ingest.stages[0]
    assert stage.writer is None and "remote_write" not in ingest.heartbeat(time.time())
