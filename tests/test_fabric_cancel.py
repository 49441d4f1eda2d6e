"""Cancelling a whole fabric sweep (issue 38): its jobs not yet ended are cancelled and no round starts after."""

import json

import pytest

from dashboard.accounts.models import AuditEvent
from dashboard.benchmarks.models import BenchmarkJob, FabricSweep
from dashboard.benchmarks.sweeps import advance
from gpulse.keys import Keys
from tests.benchmark_nodes import report_nodes

pytestmark = pytest.mark.django_db
NODES = ["cx-1", "cx-2", "cx-3", "cx-4"]


@pytest.fixture
def running_sweep(operator, redis_client, settings) -> FabricSweep:
    """A sweep of 4 nodes in its first round: each node has a worker's heartbeat, so its pair jobs queue."""
    settings.GPULSE_RENDEZVOUS_ADDR = "127.0.0.1"
    report_nodes(redis_client, NODES)
    for node in NODES:
        redis_client.set(Keys().worker(node), "1", ex=60)
    response = operator.post("/api/v1/fabric-sweeps", json.dumps({"nodes": NODES, "backend": "gloo",
                                                                   "size_bytes": "256K"}),
                             content_type="application/json")
    assert response.status_code == 202, response.content
    sweep = FabricSweep.objects.get(pk=response.json()["id"])
    assert (sweep.status, sweep.round, len(sweep.rounds)) == ("running", 0, 3)
    assert list(sweep.jobs.values_list("status", flat=True)) == ["queued", "queued"]
    return sweep


def test_its_launcher_cancels_it_and_its_jobs_and_no_later_round_starts(operator, running_sweep):
    response = operator.post(f"/api/v1/fabric-sweeps/{running_sweep.pk}/cancel")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["reason"]) == ("cancelled", "cancelled by operator")
    assert [job["status"] for job in body["jobs"]] == ["cancelled", "cancelled"]
    assert AuditEvent.objects.filter(action="fabric_sweep.cancel", target=f"sweep {running_sweep.pk}").exists()

    advance(FabricSweep.objects.get(pk=running_sweep.pk))  # what the reaper does once a round's jobs ended
    assert BenchmarkJob.objects.count() == 2 and FabricSweep.objects.get(pk=running_sweep.pk).round == 0
    # Once ended, a second cancel changes nothing and says so.
    again = operator.post(f"/api/v1/fabric-sweeps/{running_sweep.pk}/cancel")
    assert again.status_code == 409 and again.json()["status"] == "cancelled"


def test_a_viewer_may_not_cancel_it_and_is_told_who_may(viewer, running_sweep):
    response = viewer.post(f"/api/v1/fabric-sweeps/{running_sweep.pk}/cancel")
    assert response.status_code == 403
    assert response.json()["error"] == ("only its launcher or a holder of benchmarks.cancel_any_benchmark can "
                                        f"cancel fabric sweep {running_sweep.pk}")
    assert FabricSweep.objects.get(pk=running_sweep.pk).status == "running"
    assert viewer.post("/api/v1/fabric-sweeps/999999/cancel").status_code == 404


def test_the_sweep_page_offers_the_cancel_button_to_its_launcher_and_the_form_cancels_it(operator, viewer,
                                                                                         running_sweep):
    page = f"/benchmarks/fabric/{running_sweep.pk}/"
    assert 'id="cancel"' in operator.get(page).content.decode()
    assert 'id="cancel"' not in viewer.get(page).content.decode()
    response = operator.post(f"{page}cancel/")
    assert response.status_code == 302 and response["Location"] == page
    after = operator.get(page).content.decode()
    assert 'id="sweep-status">cancelled<' in after and "cancelled by operator" in after
    assert 'id="cancel"' not in after
