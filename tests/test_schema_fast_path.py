"""read()'s fast gate (gpulse.schema.read_fast) against validate() (read_checked): for every entry the
gate lets through, the same sample, with the same types, and nothing nulled; everything else goes to
validate(), which rejects, words the error and nulls.

The contract's own cases (tests/test_ingest_schema.py) go through read_both() too.
"""

import math

import orjson
import pytest

from collectors.dcgm import DcgmSource
from collectors.health_checks import HealthChecks
from collectors.simulated import SimulatedFleet
from collectors.sources import Identity
from gpulse import schema
from tests.samples import gpu, sample
from tests.test_collector_dcgm import exporter  # noqa: F401  (fixture)
from tests.test_ingest_poison import nulled_readings, poison


def typed(value):
    """``value`` with every leaf's type beside it: 1 == 1.0 == True, but a reader sees the difference."""
    if type(value) is dict:
        return {key: typed(item) for key, item in value.items()}
    if type(value) is list:
        return [typed(item) for item in value]
    return type(value).__name__, value


def read_both(raw: bytes | str) -> tuple[tuple[dict, int] | None, dict | None]:
    """(read_checked's (sample, nulled), or None where it rejects; read_fast's sample or None),
    asserting that they agree and that read() gives what read_checked gives."""
    fast = schema.read_fast(raw)
    try:
        checked = schema.read_checked(raw)
    except schema.MalformedSample as exc:
        assert fast is None, f"the fast gate let through what validate() rejects: {exc}"
        with pytest.raises(schema.MalformedSample) as raised:
            schema.read(raw)
        assert str(raised.value) == str(exc)
        return None, None
    if fast is not None:
        assert checked[1] == 0 and typed(fast) == typed(checked[0])
    got = schema.read(raw)
    assert got[1] == checked[1] and typed(got[0]) == typed(checked[0])
    return checked, fast


def takes_the_fast_path(raw: bytes | str) -> dict:
    checked, fast = read_both(raw)
    assert fast is not None, "a valid entry with every reading in range missed the fast gate"
    return fast


def goes_to_validate(raw: bytes | str) -> tuple[dict, int] | None:
    checked, fast = read_both(raw)
    assert fast is None
    return checked


def test_every_simulated_sample_takes_the_fast_path_unchanged_with_lost_gpus_xids_and_health():
    fleet = SimulatedFleet(20, 8, interval=1.0, seed=3)
    fleet.inject("sim-01", 3, "lost")
    fleet.inject("sim-02", None, "xid:79")
    fleet.inject("sim-03", 0, "hot")
    fleet.inject("sim-04", 1, "nvlink_down")
    fleet.inject("sim-05", None, "ib_down")
    fleet.inject("sim-06", 2, "gpu_missing")
    identity = Identity()
    checks = HealthChecks(expected_gpus=8)
    for _ in range(3):
        for entry in identity.stamp(fleet.sample()):
            checks.annotate(entry, entry["ts"])
            assert takes_the_fast_path(schema.encode(entry)) == entry
    fleet.close()


def test_dcgm_samples_take_the_fast_path_unchanged_with_their_unknown_health(exporter):  # noqa: F811
    source = DcgmSource(exporter.url, interval=1.0)
    checks = HealthChecks()
    for _ in range(2):
        for entry in source.sample():
            checks.annotate(entry, entry["ts"])
            assert any(finding["status"] == "unknown" for finding in entry["health"]["findings"])
            assert takes_the_fast_path(schema.encode(entry)) == entry


def test_poison_entries_go_to_validate_and_are_rejected_alike():
    for raw in poison(now=1.7e9, old=1.7e9 - 3600):
        if len(raw) <= schema.MAX_ENTRY_BYTES:
            assert goes_to_validate(raw) is None
        with pytest.raises(schema.MalformedSample):
            schema.read(raw)


def test_readings_out_of_range_go_to_validate_which_nulls_and_counts_them():
    entries, readings = nulled_readings(now=1.7e9)
    assert sum(goes_to_validate(raw)[1] for raw in entries) == readings


@pytest.mark.parametrize("where", ["sample", "gpu", "host", "process", "k8s"])
@pytest.mark.parametrize("in_range", [True, False], ids=["fast", "validate"])
def test_a_field_the_contract_does_not_name_is_dropped_by_both_paths(where, in_range):
    entry = sample("n1", gpus=2, processes=[{"pid": 1, "name": "python", "user": "u", "mem_used": 5}],
                   k8s={"pod": "p", "namespace": "ns", "container": "c"})
    if not in_range:
        entry["gpus"][1]["temp"] = 400.0  # out of range: validate() decides, and nulls it
    expected = orjson.loads(schema.encode(entry))
    target = {"sample": entry, "gpu": entry["gpus"][1], "host": entry["host"],
              "process": entry["gpus"][0]["processes"][0], "k8s": entry["gpus"][0]["k8s"]}[where]
    target["future"] = {"any": ["json", 1.5] * 100}
    raw = schema.encode(entry)
    got = takes_the_fast_path(raw) if in_range else goes_to_validate(raw)[0]
    if not in_range:
        expected["gpus"][1]["temp"] = None
    assert got == expected and b"future" not in orjson.dumps(got)


def test_ints_stay_ints_and_floats_stay_floats():
    entry = sample("n1", gpus=1, util=50.0, temp=60, power=400, ts=1_700_000_000, interval=1)
    fast = takes_the_fast_path(schema.encode(entry))
    assert typed(fast) == typed(entry)


def test_each_reading_at_its_bounds_takes_the_fast_path_and_just_past_them_goes_to_validate():
    for name, low, high in schema._GPU_BOUNDS:
        for value in (low, high, float(low), float(high)):
            takes_the_fast_path(schema.encode(sample("n1", gpus=1, **{name: value})))
        for value in (low - 1, high + 1, math.nextafter(float(low), -math.inf), math.nextafter(float(high), math.inf)):
            assert goes_to_validate(schema.encode(sample("n1", gpus=1, **{name: value})))[1] == 1
    for name, _low, high in schema._HOST_BOUNDS:
        entry = sample("n1", gpus=1)
        entry["host"][name] = math.nextafter(float(high), math.inf)
        assert goes_to_validate(schema.encode(entry))[1] == 1


@pytest.mark.parametrize("raw", [
    b'{"v":1,"node":"n1\\n","ts":1.0,"interval":1.0,"gpus":[]}',  # a name may not end in a newline
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"seq":1,"boot":"b\\n"}',
    b'{"v":1.0,"node":"n1","ts":1.0,"interval":1.0,"gpus":[]}',
    b'{"v":true,"node":"n1","ts":1.0,"interval":1.0,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":true,"interval":1.0,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":0.04,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":3601,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":0,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"seq":3}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"boot":"b"}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"seq":null,"boot":"b"}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"seq":9223372036854775808,"boot":"b"}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"util":18446744073709551616}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"util":1e400}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"util":NaN}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"lost":1}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0},{"index":0}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"index":300}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":300,"index":0}]}',  # the last one counts
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"name":"\xff"}]}',  # not UTF-8
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"name":"\\ud800"}]}',  # a lone surrogate
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"k8s":{"pod":"p","node":"x"}}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"throttle":["gpu_idle","gpu_idle"]}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"processes":[{"name":"x"}]}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[]} x',
    b'\xef\xbb\xbf{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"host":{"cpu_util":"5"}}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[],"host":[]}',
])
def test_edge_entries_agree(raw):
    read_both(raw)
    read_both(raw.decode("utf-8", "replace"))


@pytest.mark.parametrize("raw", [
    b' {"v":1,"node":"n1","ts":0,"interval":3600,"gpus":[],"host":null} \n',
    b'{"v":1,"node":"n1","ts":1.0,"interval":0.05,"gpus":[],"seq":null,"boot":null}',
    b'{"v":1,"node":"_.-","ts":4102444800,"interval":1.0,"gpus":[],"seq":0,"boot":"a-_"}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":255,"util":-0.0,"temp":-40,"xid":[0,2147483647],'
    b'"throttle":null,"processes":null,"k8s":{},"lost":true,"uuid":null}]}',
    '{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":0,"name":"\u00e9\U0001f600"}]}',
    b'{"v":1,"node":"n1","ts":1.0,"interval":1.0,"gpus":[{"index":1,"util":5},{"index":0,"util":5,"util":6}]}',
])
def test_valid_entries_take_the_fast_path(raw):
    takes_the_fast_path(raw)


def test_texts_at_their_length_limit_take_the_fast_path_and_past_it_go_to_validate():
    at = sample("n1", gpus=1, name="é" * schema.MAX_TEXT, k8s={"pod": "p" * schema.MAX_K8S_NAME})
    takes_the_fast_path(schema.encode(at))
    past = sample("n1", gpus=1, name="😀" * (schema.MAX_TEXT + 1))
    assert goes_to_validate(schema.encode(past)) is None
    lists = sample("n1", gpus=1, xid=[79] * (schema.MAX_XIDS + 1))
    assert goes_to_validate(schema.encode(lists)) is None
    most = {**sample("n1", gpus=0), "gpus": [gpu(i) for i in range(schema.MAX_GPUS)]}
    takes_the_fast_path(schema.encode(most))
