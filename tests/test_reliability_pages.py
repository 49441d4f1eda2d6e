"""The /reliability/ page, its import form, the node page's incidents and the /metrics counters."""

import datetime as dt
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.reliability.models import Exposure, Incident
from gpulse import schema
from gpulse.keys import Keys
from tests.samples import sample

pytestmark = pytest.mark.django_db

PAGE = "/reliability/"


def incident(node="n1", component="pcie", start="2026-01-05T10:00:00+00:00", end=None, planned=False, **more):
    return Incident.objects.create(node=node, component=component, start=dt.datetime.fromisoformat(start),
                                   end=None if end is None else dt.datetime.fromisoformat(end), planned=planned,
                                   **more)


@pytest.fixture
def record():
    Exposure.objects.create(start=dt.datetime(2026, 1, 5, tzinfo=dt.UTC), end=dt.datetime(2026, 1, 15, tzinfo=dt.UTC),
                            node_hours=2400, source=Incident.IMPORTED)
    incident(end="2026-01-05T12:00:00+00:00", cause="GPU 1 PCIe link: x8 of x16", gpu=1)
    incident(node="n2", component="nvlink", start="2026-01-06T10:00:00+00:00")
    incident(node="n3", component="node_down", start="2026-01-07T10:00:00+00:00", planned=True,
             end="2026-01-07T11:00:00+00:00")


def test_the_page_shows_the_numbers_components_and_open_incidents(viewer, record):
    page = viewer.get(PAGE).content.decode()
    assert 'id="unexpected">2<' in page and 'id="planned">1<' in page
    assert 'id="node-mtbf">1200.0 h' in page
    assert "<td>PCIe</td>" in page and "<td>NVLink</td>" in page
    open_table = page.split('id="open-incidents"')[1].split("</table>")[0]
    assert "n2" in open_table and "n1" not in open_table
    # The planner starts from the measured MTBF.
    assert 'name="node_mtbf_h" min="0" step="any" value="1200.0"' in page
    # Not staff: no import form.
    assert 'id="import-form"' not in page


def test_the_planner_plans_on_the_page_and_names_a_bad_field(viewer, record):
    page = viewer.get(PAGE, {"nodes": 1, "hours": 1, "checkpoint_write_s": 300, "node_mtbf_h": 24}).content.decode()
    assert 'id="plan-daly">7001 s' in page  # 116.7 min
    assert 'id="plan-p">4.1 %' in page  # 1 − e^(−1/24)
    page = viewer.get(PAGE, {"nodes": "many", "hours": 1, "checkpoint_write_s": 300}).content.decode()
    assert 'id="planner-error" role="alert">nodes:' in page
    page = viewer.get(PAGE, {"nodes": "1.5", "hours": 1, "checkpoint_write_s": 300}).content.decode()
    assert 'id="planner-error" role="alert">nodes: a whole number' in page


def test_the_planner_asks_for_a_node_mtbf_while_none_is_measured(viewer):
    page = viewer.get(PAGE).content.decode()
    assert 'id="planner-empty"' in page and 'id="planner-error"' not in page


def test_staff_import_from_the_page_and_a_bad_file_imports_nothing(admin):
    good = SimpleUploadedFile("h.csv", b"start,node,component\n2026-01-05T10:00Z,n1,GPU\n")
    response = admin.post(PAGE, {"file": good, "nodes": "10", "since": "2026-01-01", "until": "2026-02-01"},
                          follow=True)
    assert "Imported 1 incidents (0 planned)" in response.content.decode()
    bad = SimpleUploadedFile("h.csv", b"start,node,component\n2026-01-05T10:00Z,n1,GPU\nsoon,n2,GPU\n")
    response = admin.post(PAGE, {"file": bad}, follow=True)
    assert "Nothing imported: line 3: start:" in response.content.decode()
    assert Incident.objects.count() == 1


def test_importing_from_the_page_is_for_staff(viewer):
    good = SimpleUploadedFile("h.csv", b"start,node,component\n2026-01-05T10:00Z,n1,GPU\n")
    assert viewer.post(PAGE, {"file": good}).status_code == 403
    assert not Incident.objects.exists()


def test_a_bad_range_shows_why(viewer):
    response = viewer.get(PAGE, {"since": "soon"})
    assert response.status_code == 400 and 'id="range-error"' in response.content.decode()


def test_the_page_needs_a_login(client):
    assert client.get(PAGE).status_code == 302


def test_the_node_page_lists_the_nodes_incidents(viewer, record, redis_client):
    for name in ("n1", "n9"):
        redis_client.set(Keys().node(name), schema.encode(sample(name, ts=time.time(), interval=60)))
    page = viewer.get("/nodes/n1/").content.decode()
    section = page.split('id="incidents"')[1].split("</section>")[0]
    assert "GPU 1 PCIe link: x8 of x16" in section and "NVLink" not in section
    assert 'id="incident-none"' in viewer.get("/nodes/n9/").content.decode()


def test_metrics_count_incidents_by_component_and_give_the_node_mtbf(viewer, record):
    text = viewer.get("/metrics").content.decode()
    assert 'gpulse_incidents_total{component="pcie",planned="false"} 1.0' in text
    assert 'gpulse_incidents_total{component="node_down",planned="true"} 1.0' in text
    assert "gpulse_node_mtbf_seconds 4.32e+06" in text  # 2,400 node-hours / 2


def test_the_node_page_and_the_api_say_what_made_an_incident_planned(viewer, redis_client):
    why = "Slurm drain by alice at 2026-01-07T09:00:00+00:00: maintenance: PSU <swap>"
    incident(node="n3", component="node_down", start="2026-01-07T10:00:00+00:00", planned=True, planned_by=why)
    redis_client.set(Keys().node("n3"), schema.encode(sample("n3", ts=time.time(), interval=60)))
    section = viewer.get("/nodes/n3/").content.decode().split('id="incidents"')[1].split("</section>")[0]
    assert "planned <span" in section and "maintenance: PSU &lt;swap&gt;" in section  # escaped: a reason is free text
    listed = viewer.get("/api/v1/reliability/incidents", {"node": "n3"}).json()["incidents"]
    assert [(entry["planned"], entry["planned_by"]) for entry in listed] == [(True, why)]
