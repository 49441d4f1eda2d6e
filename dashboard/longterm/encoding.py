"""The cluster as Prometheus remote-write 1.0 requests: protobuf WriteRequests, snappy-compressed (block format).

The series are exactly /metrics' (dashboard/metrics.py's gpu_families and node_families, read from ingest's
state instead of Redis): the same names, labels and units, one sample each at the round's time. The protobuf
is written by hand because a round at 8,000 GPUs is about 250,000 series: each label (name and value) is
encoded once and kept (LabelCache: about 10,000 of them at 8,000 GPUs, a node, uuid or owner each, where a
cache of whole series would hold 250,000), so a series costs a few dictionary lookups, a join and an 8-byte
pack. The messages (prometheus/prompb types.proto and remote.proto):

  WriteRequest { repeated TimeSeries timeseries = 1; }
  TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
  Label        { string name = 1; string value = 2; }
  Sample       { double value = 1; int64 timestamp = 2; }  // milliseconds
"""

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import cramjam
from django.conf import settings

from dashboard.metrics import gpu_families, node_families

# Series per request: Prometheus sends 2,000; VictoriaMetrics and Mimir take far more per request, and fewer
# requests cost less. About 1 MB before compression.
BATCH_SERIES = 5_000
# Nodes whose families are built at once (exported_families).
NODES_AT_ONCE = 100

_pack_double = struct.Struct("<d").pack


def varint(number: int) -> bytes:
    out = bytearray()
    while True:
        bits = number & 0x7F
        number >>= 7
        if number:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


# Every length a series' message is likely to have, encoded: one lookup instead of a varint() call per series.
_LENGTHS = [varint(length) for length in range(16384)]


def _length(length: int) -> bytes:
    return _LENGTHS[length] if length < 16384 else varint(length)


class LabelCache:
    """Each label's encoded bytes (a TimeSeries.labels field), by (name, value). An empty value encodes as
    nothing: Prometheus' own meaning of it, the label is absent. Owners and nodes come and go: past
    MAX_LABELS it starts again."""

    MAX_LABELS = 200_000

    def __init__(self):
        self.labels: dict[tuple[str, str], bytes] = {}

    def label(self, name: str, value: str) -> bytes:
        encoded = self.labels.get((name, value))
        if encoded is None:
            encoded = _field(1, _field(1, name.encode()) + _field(2, value.encode())) if value else b""
            self.labels[(name, value)] = encoded
        return encoded

    def trim(self) -> None:
        if len(self.labels) > self.MAX_LABELS:
            self.labels = {}


@dataclass
class Batch:
    """One remote-write request: its compressed body and the samples it carries."""

    body: bytes
    samples: int


def exported_families(nodes: list[dict]) -> Iterator:
    """/metrics' GPU and node families for these nodes (prometheus_client MetricFamily objects), NODES_AT_ONCE
    nodes at a time: /metrics builds every sample of the cluster before it writes one (250,000 objects at 8,000
    GPUs), which a round need not hold at once."""
    for start in range(0, len(nodes), NODES_AT_ONCE):
        some = nodes[start:start + NODES_AT_ONCE]
        yield from gpu_families(some, settings.GPULSE_BUSY_UTIL, settings.GPULSE_BUSY_SM_ACTIVITY)
        yield from node_families(some)


def _batch(pieces: list[bytes]) -> Batch:
    return Batch(bytes(cramjam.snappy.compress_raw(b"".join(pieces))), len(pieces) // 6)


def encode_round(nodes: list[dict], timestamp_ms: int, cache: LabelCache,
                 batch_series: int = BATCH_SERIES) -> list[Batch]:
    """The nodes' series at ``timestamp_ms`` as remote-write requests of at most ``batch_series`` series."""
    cache.trim()
    label, known = cache.label, cache.labels
    tail = b"\x10" + varint(timestamp_ms)  # Sample.timestamp
    sample_head = b"\x12" + varint(9 + len(tail)) + b"\x09"  # TimeSeries.samples, its length, Sample.value
    sample_length = len(sample_head) + 8 + len(tail)
    batches: list[Batch] = []
    pieces: list[bytes] = []
    for family in exported_families(nodes):
        if not family.samples:
            continue
        names = sorted(family.samples[0][1])  # a family's samples share its label names; the protocol sorts them
        for sample in family.samples:  # (name, labels, value, ...): indexed, the cheapest way in at this count
            values = sample[1]
            encoded = b"".join([known.get(("__name__", sample[0])) or label("__name__", sample[0]),
                                *[known.get((name, values[name])) or label(name, values[name]) for name in names]])
            pieces += (b"\x0a", _length(len(encoded) + sample_length), encoded, sample_head,
                       _pack_double(sample[2]), tail)
            if len(pieces) == 6 * batch_series:
                batches.append(_batch(pieces))
                pieces = []
    if pieces:
        batches.append(_batch(pieces))
    return batches
