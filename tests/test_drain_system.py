"""Drain through the whole demo system: an Xid on a simulated GPU fires a drain rule in ingest, the demo's
scheduler worker drains the node in a real slurmctld, and resumes it once the fault is cleared."""

import json
import time
import urllib.request

import pytest

from devtools.redis_server import free_port
from devtools.stack import Stack
from tests.slurm_cluster import SlurmCluster, slurm_binaries_missing

NODE = "sim-01"  # the simulated fleet's first node, and the Slurm node of the same name


@pytest.fixture
def slurm(tmp_path_factory):
    if missing := slurm_binaries_missing():
        pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}): run `make slurm` (as root)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), node=NODE)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def system(slurm, tmp_path):
    stack = Stack(
        port=free_port(), state_dir=tmp_path / "stack", sim_nodes=2, sim_gpus=4, node_workers=False,
        extra_env={"GPULSE_SLURM_DRAIN": "true", "SLURM_CONF": str(slurm.conf), "GPULSE_SCONTROL_TIMEOUT": "5"},
    )
    try:
        yield stack.start()
    finally:
        stack.stop()


def call(stack: Stack, token: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        stack.url.rstrip("/") + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response) if response.headers.get_content_type() == "application/json" else {}


def slurm_state(cluster: SlurmCluster) -> tuple[bool, str]:
    node = cluster.show()
    return "DRAIN" in node["State"].split("+"), node["Reason"]


def wait_for(read, until, timeout: float):
    deadline = time.monotonic() + timeout
    while not until(value := read()):
        assert time.monotonic() < deadline, f"still {value!r} after {timeout} s"
        time.sleep(0.2)
    return value


def test_the_demo_drains_a_node_whose_gpu_reports_an_xid_and_resumes_it_when_the_fault_clears(system, slurm):
    token = system.manage("issue_token", "admin").strip()
    call(system, token, "POST", "/api/v1/rules", {"name": "Xid drains", "metric": "gpu.xid", "comparison": ">",
                                                   "threshold": 0, "node_glob": NODE, "drain": True,
                                                   "resume_after": 2})
    # No wait: ingest's evaluator reloads its rules at the tick after one is saved.
    call(system, token, "POST", "/api/v1/simulator/faults", {"node": NODE, "gpu": 2, "fault": "xid:79"})
    drained, reason = wait_for(lambda: slurm_state(slurm), lambda s: s[0], timeout=30)
    assert reason.startswith("gpulse: Xid drains on GPU 2: gpu.xid > 0 (now 79)")

    call(system, token, "POST", "/api/v1/simulator/faults", {"node": NODE, "gpu": 2, "fault": "clear"})
    wait_for(lambda: slurm_state(slurm), lambda s: not s[0], timeout=30)
    page = urllib.request.urlopen(urllib.request.Request(
        system.url + f"nodes/{NODE}/", headers={"Authorization": f"Bearer {token}"}), timeout=10).read().decode()
    assert 'id="drain-table"' in page and "Xid drains" in page and "resumed" in page
