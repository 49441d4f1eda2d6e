"""Importing incident history (API and manage.py import_incidents) and the numbers that come back."""

import datetime as dt

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from dashboard.reliability.interval import mtbf_interval
from dashboard.reliability.models import Exposure, Incident

pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/reliability/import"
WINDOW = {"nodes": "100", "since": "2026-01-05T00:00:00Z", "until": "2026-02-04T00:00:00Z"}  # 30 days
HISTORY = b"""start,node,component,gpu,end,planned,cause
2026-01-05T10:00:00Z,n001,GPU,3,2026-01-05T12:00:00Z,,Xid 79
2026-01-06T10:00:00Z,n002,GPU HBM3 memory,0,2026-01-06T14:00:00Z,false,
2026-01-13T09:00:00Z,n001,Network switch/cable,,2026-01-13T10:00:00Z,,
2026-01-14T09:00:00Z,n003,GPU,,,,
2026-01-20T00:00:00Z,n004,Host maintenance,,2026-01-20T06:00:00Z,true,kernel upgrade
"""


def upload(client, data: bytes, **fields):
    return client.post(IMPORT, {"file": SimpleUploadedFile("history.csv", data, "text/csv"), **WINDOW, **fields})


def test_imported_history_comes_back_by_component_with_planned_ones_apart(admin):
    response = upload(admin, HISTORY)
    assert response.status_code == 201
    assert response.json() == {"incidents": 5, "planned": 1, "unexpected": 4, "node_hours": 100 * 30 * 24}

    numbers = admin.get("/api/v1/reliability").json()
    assert numbers["unexpected"] == 4 and numbers["planned"] == 1 and numbers["open"] == 1
    # Kept as written.
    assert numbers["by_component"] == {"GPU": 2, "GPU HBM3 memory": 1, "Network switch/cable": 1}
    assert numbers["node_hours"] == 72_000
    assert numbers["node_mtbf_h"] == 18_000
    low, high = mtbf_interval(72_000, 4)
    assert numbers["node_mtbf_h_95"] == [pytest.approx(low, abs=1e-3), pytest.approx(high, abs=1e-3)]
    assert numbers["failures_per_1000_node_days"] == pytest.approx(4 / 3000 * 1000)
    # MTTR: the three closed unexpected ones, 2 h, 4 h, 1 h.
    assert numbers["mttr_h"] == pytest.approx(7 / 3, abs=1e-3) and numbers["repairs"] == 3
    assert numbers["top_nodes"][0] == {"node": "n001", "incidents": 2}
    assert numbers["weekly"] == {
        "weeks": ["2026-01-05", "2026-01-12"],
        "components": {"GPU": [1, 1], "GPU HBM3 memory": [1, 0], "Network switch/cable": [0, 1]},
    }


def test_the_range_counts_the_incidents_and_the_share_of_the_window_within_it(admin):
    upload(admin, HISTORY)
    numbers = admin.get("/api/v1/reliability", {"since": "2026-01-05T00:00:00Z",
                                                "until": "2026-01-08T00:00:00Z"}).json()
    assert numbers["unexpected"] == 2 and numbers["node_hours"] == pytest.approx(100 * 72)


@pytest.mark.parametrize(("line", "error"), [
    (b"2026-01-07,n9,GPU,x,,,", "line 3: gpu:"),
    (b"yesterday,n9,GPU,,,,", "line 3: start:"),
    (b"2026-01-07,,GPU,,,,", "line 3: node:"),
    (b"2026-01-07,n9,,,,,", "line 3: component:"),
    (b"2026-01-07,n9,GPU,,2026-01-06,,", "line 3: end:"),
    (b"2026-01-07,n9,GPU,,,maybe,", "line 3: planned:"),
    (b"2027-01-07,n9,GPU,,,,", "line 3: start:"),  # outside the window
])
def test_a_file_with_one_bad_line_imports_nothing_and_names_the_line_and_field(admin, line, error):
    data = b"start,node,component,gpu,end,planned,cause\n2026-01-06,n1,GPU,,,,\n" + line + b"\n"
    response = upload(admin, data)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)
    assert not Incident.objects.exists() and not Exposure.objects.exists()


def test_a_header_without_a_required_column_or_with_an_unknown_one_is_refused(admin):
    assert upload(admin, b"start,node\n2026-01-06,n1\n").json()["error"].startswith("line 1: component:")
    assert upload(admin, b"start,node,component,colour\n").json()["error"].startswith("line 1: colour:")


def test_the_window_needs_all_three_fields(admin):
    response = admin.post(IMPORT, {"file": SimpleUploadedFile("h.csv", HISTORY), "nodes": "10"})
    assert response.status_code == 400 and response.json()["error"].startswith("since:")


def test_importing_is_for_staff(viewer):
    assert upload(viewer, HISTORY).status_code == 403
    assert not Incident.objects.exists()


def test_the_command_imports_the_same_and_refuses_the_same(tmp_path):
    path = tmp_path / "history.csv"
    path.write_bytes(HISTORY)
    call_command("import_incidents", str(path), "--nodes", "100", "--since", WINDOW["since"], "--until",
                 WINDOW["until"])
    assert Incident.objects.count() == 5 and Incident.objects.filter(planned=True).count() == 1
    assert Exposure.objects.get().node_hours == 72_000
    path.write_bytes(HISTORY + b"2026-01-20,n5,GPU,999,,,\n")
    with pytest.raises(CommandError, match="line 7: gpu:"):
        call_command("import_incidents", str(path))
    assert Incident.objects.count() == 5


def test_incidents_are_listed_open_or_closed_and_by_node(admin):
    upload(admin, HISTORY)
    listed = admin.get("/api/v1/reliability/incidents", {"open": "true"}).json()["incidents"]
    assert [(entry["node"], entry["end"]) for entry in listed] == [("n003", None)]
    by_node = admin.get("/api/v1/reliability/incidents", {"node": "n001"}).json()["incidents"]
    assert [entry["component"] for entry in by_node] == ["Network switch/cable", "GPU"]
    assert by_node[1] == {"node": "n001", "component": "GPU", "gpu": 3, "cause": "Xid 79",
                          "start": "2026-01-05T10:00:00+00:00", "end": "2026-01-05T12:00:00+00:00",
                          "planned": False, "planned_by": "", "source": "imported"}
    assert admin.get("/api/v1/reliability/incidents", {"open": "yes"}).status_code == 400


def test_the_plan_uses_the_measured_node_mtbf_when_none_is_given(admin):
    upload(admin, HISTORY)
    plan = admin.get("/api/v1/reliability/plan", {"nodes": 100, "hours": 24, "checkpoint_write_s": 60}).json()
    # Everything recorded up to now: the imported window's 72,000 node-hours and 4 unexpected incidents.
    assert plan["measured"] is True and plan["node_mtbf_h"] == pytest.approx(18_000)


def test_a_bad_range_answers_400_naming_it(admin):
    assert admin.get("/api/v1/reliability", {"since": "soon"}).json()["error"].startswith("since:")
    now = dt.datetime.now(dt.UTC).isoformat()
    assert admin.get("/api/v1/reliability", {"since": now, "until": "1d"}).status_code == 400
