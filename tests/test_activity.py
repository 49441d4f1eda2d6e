""""Kernels run, SMs idle": a GPU at 90 % utilization or more whose SMs are under 20 % active for a minute is
flagged in the frames (the overview's SM IDLE tag), can be alerted on, and its activity reaches /metrics."""

import json
import time

import orjson
import pytest

from dashboard.activity.stage import SmIdleStage
from dashboard.alerts.conditions import GPU_READERS
from dashboard.live.frames import FLAG_SM_IDLE
from dashboard.live.ingest import Ingest
from gpulse import schema
from gpulse.activity import kernels_run_sms_idle
from gpulse.keys import Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("util", "sm_active", "idle"), [
    (97, 0.10, True), (90, 0.199, True), (89.9, 0.10, False), (97, 0.20, False), (97, 0.85, False),
    (None, 0.10, None), (97, None, None),
])
def test_the_condition_and_its_rule_metrics(util, sm_active, idle):
    gpu = {"util": util, "sm_active": sm_active}
    assert kernels_run_sms_idle(gpu) is idle
    assert GPU_READERS["gpu.sm_idle_busy"](gpu) == (None if idle is None else int(idle))
    assert GPU_READERS["gpu.sm_active"](gpu) == (None if sm_active is None else pytest.approx(sm_active * 100))


def test_a_gpu_is_flagged_after_a_minute_of_its_samples_and_unflagged_at_once(redis_client):
    frames = []
    ingest = Ingest(redis_client, lambda frame: frames.append(orjson.loads(frame)) or True, stages=[SmIdleStage])
    start = time.time() - 200

    def step(at: float, sm_active: list) -> list[int]:
        """GPU 0 at 97 %, GPU 1 at 40 %, with these SM activities; the flags of the frame that follows."""
        node = sample("n1", gpus=2, ts=at, interval=10)
        for gpu, util, active in zip(node["gpus"], (97, 40), sm_active, strict=True):
            gpu.update(util=util, sm_active=active)
        ingest.apply(node, f"{int(at * 1000)}-0".encode())
        ingest.emit(at)
        return [row[-1] & FLAG_SM_IDLE for row in frames[-1]["nodes"]["n1"]["gpus"]]

    # GPU 1's SMs idle too, but its kernels run 40 % of the time: not the case this flags.
    assert [step(start + s, [0.05, 0.05]) for s in (0, 30, 50)] == [[0, 0]] * 3
    assert step(start + 60, [0.05, 0.05]) == [FLAG_SM_IDLE, 0]
    assert step(start + 70, [0.60, 0.05]) == [0, 0]  # working again: unflagged at once
    assert step(start + 80, [0.05, 0.05]) == [0, 0]  # and the minute starts again
    assert step(start + 90, [None, 0.05]) == [0, 0]  # unknown activity is never flagged ...
    assert step(start + 150, [0.05, 0.05]) == [0, 0]  # ... and breaks the run
    assert step(start + 210, [0.05, 0.05]) == [FLAG_SM_IDLE, 0]


def test_the_time_the_condition_must_hold_is_a_setting(redis_client, settings):
    settings.GPULSE_SM_IDLE_FOR = 20
    frames = []
    ingest = Ingest(redis_client, lambda frame: frames.append(orjson.loads(frame)) or True, stages=[SmIdleStage])
    start = time.time() - 100
    flags = []
    for second in (0, 10, 20):
        node = sample("n1", gpus=1, ts=start + second, interval=10)
        node["gpus"][0].update(util=97, sm_active=0.05)
        ingest.apply(node, f"{int((start + second) * 1000)}-0".encode())
        ingest.emit(start + second)
        flags.append(frames[-1]["nodes"]["n1"]["gpus"][0][-1] & FLAG_SM_IDLE)
    assert flags == [0, 0, FLAG_SM_IDLE]


def test_activity_readings_are_exported_as_ratios(client, admin_user, redis_client):
    now, keys = time.time(), Keys()
    node = sample("act-1", gpus=2, ts=now, interval=60)
    node["gpus"][0].update(sm_active=0.42, tensor_active=0.3)  # GPU 1 has no GPM: no series, never 0
    redis_client.set(keys.node("act-1"), schema.encode(node))
    redis_client.hset(keys.known_nodes, "act-1", json.dumps({"ts": now, "interval": 60}))
    client.force_login(admin_user)
    body = client.get("/metrics").content.decode()
    lines = [line for line in body.splitlines() if line.startswith("gpulse_gpu_sm_active_ratio{")]
    assert len(lines) == 1 and 'gpu="0"' in lines[0] and lines[0].endswith(" 0.42")
    assert any(line.startswith("gpulse_gpu_tensor_active_ratio{") and line.endswith(" 0.3")
               for line in body.splitlines())
    assert "DCGM_FI_PROF_SM_ACTIVE" in body  # the help text names what it is
