"""The /usage/ page and its CSV downloads as the server renders them, against the API's numbers."""

import csv
import io
import time
from html.parser import HTMLParser

import pytest

from dashboard.usage import views
from dashboard.usage.models import EnergyPrice, GpuPrice
from dashboard.usage.stage import IdleStage
from dashboard.usage.templatetags.usage_format import busy_by_words, idle_for, one_decimal, usd
from tests.ingest_stages import stage_of
from tests.test_ingest import apply, frames, make_ingest  # noqa: F401 (fixtures)
from tests.test_usage_accounting import A100, H100, node_sample, process, three_hours  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

FIGURES = ("gpu_hours", "busy_pct", "busy_by", "idle_gpu_hours", "idle_cost", "cost", "kwh", "energy_cost")
MONEY = {"idle_cost", "cost", "energy_cost"}
XSS = "<script>alert(1)</script>"
FORMULA = "=cmd|' /C calc'!A0"


class Tables(HTMLParser):
    """The text of every cell of every table with an id: {id: {"body": [[cell, …]], "foot": [[…]]}}."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: dict[str, dict[str, list[list[str]]]] = {}
        self.table: dict | None = None
        self.part = "body"
        self.cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("id"):
            self.table = self.tables.setdefault(dict(attrs)["id"], {"head": [], "body": [], "foot": []})
        elif self.table is not None and tag in ("thead", "tbody", "tfoot"):
            self.part = tag[1:]
        elif self.table is not None and tag == "tr":
            self.table[self.part].append([])
        elif self.table is not None and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None
        elif tag in ("td", "th") and self.cell is not None and self.table is not None:
            self.table[self.part][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def held_by(user: str, job: str) -> dict:
    """A process whose user and job are any text a node may send."""
    return {**process(user, None), "job": job}


def shown(row: dict) -> list[str]:
    """A row's figures as the page writes them."""
    return [usd(row[figure]) if figure in MONEY else busy_by_words(row[figure]) if figure == "busy_by"
            else one_decimal(row[figure]) for figure in FIGURES]


@pytest.fixture
def priced(db):
    GpuPrice.objects.create(gpu_model=H100, usd_per_gpu_hour="1234.50")  # thousands, to see the separator
    GpuPrice.objects.create(gpu_model=A100, usd_per_gpu_hour="1.50")
    EnergyPrice.objects.create(usd_per_kwh="0.20")


def test_the_usage_page_needs_login(client):
    response = client.get("/usage/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert client.get("/usage/user.csv").status_code == 302


@pytest.mark.parametrize("by", ["user", "job", "node"])
def test_the_page_shows_the_apis_numbers_for_the_same_range(viewer, three_hours, priced, by):  # noqa: F811
    query = f"since={three_hours}&until={three_hours + 3 * 3600}"
    answer = viewer.get(f"/api/v1/usage?by={by}&{query}").json()
    response = viewer.get(f"/usage/?{query}")
    assert response.status_code == 200
    table = Tables(response.content.decode()).tables[f"usage-{by}"]
    names = {"user": ["user"], "job": ["job", "pod", "user"], "node": ["node"]}[by]
    extra = ["allocated_pct"] if by == "node" else []
    expected = [[row[name] or "—" for name in names] + [one_decimal(row[e]) for e in extra] + shown(row)
                for row in answer["rows"]]
    assert table["body"] == expected  # the same rows, in the same order (costliest first)
    assert table["foot"] == [["Total"] + [""] * len(extra) + shown(answer["totals"])]
    assert answer["rows"] and any("," in cell for row in expected for cell in row)  # $1,234.56, not 1234.56


def test_a_table_shows_the_costliest_groups_and_the_totals_of_all(viewer, three_hours, monkeypatch):  # noqa: F811
    monkeypatch.setattr(views, "PAGE_ROWS", 2)
    query = f"since={three_hours}&until={three_hours + 3 * 3600}"
    answer = viewer.get(f"/api/v1/usage?by=user&{query}").json()
    html = viewer.get(f"/usage/?{query}").content.decode()
    table = Tables(html).tables["usage-user"]
    assert len(answer["rows"]) == 3
    assert [row[0] for row in table["body"]] == [row["user"] for row in answer["rows"][:2]]
    assert table["foot"][0][1:] == shown(answer["totals"])
    assert "the 2 costliest, the CSV has all" in html
    assert len(list(csv.DictReader(io.StringIO(viewer.get(f"/usage/user.csv?{query}").content.decode())))) == 3


def test_the_page_names_its_range_and_links_csvs_of_that_range(viewer, three_hours):  # noqa: F811
    html = viewer.get(f"/usage/?since={three_hours + 600}&until={three_hours + 3 * 3600 - 600}").content.decode()
    # Whole hours: the CSVs ask for exactly what the page shows, not a span that moves with the clock.
    assert f'href="/usage/node.csv?since={three_hours}&amp;until={three_hours + 3 * 3600}"' in html
    assert 'id="usage-series"' in html and "/static/gpulse/usage.js" in html
    assert '<a href="/nodes/n1/">n1</a>' in html


def test_the_range_picker_marks_the_range_shown(viewer):
    html = viewer.get("/usage/").content.decode()
    assert '<a href="?since=7d" class="active" aria-current="true">7 d</a>' in html
    html = viewer.get("/usage/?since=24h").content.decode()
    assert '<a href="?since=24h" class="active" aria-current="true">24 h</a>' in html
    assert 'name="since" value="24h"' in html


@pytest.mark.parametrize("query, message", [
    ("since=yesterday", "not a time: 'yesterday'"),
    ("since=1700003600&until=1700000000", "is not after 'since'"),
    ("since=1000d", "a range of at most 400 days"),
])
def test_a_bad_range_shows_why_on_the_page_with_400(viewer, query, message):
    response = viewer.get(f"/usage/?{query}")
    assert response.status_code == 400
    error = Tables(response.content.decode())
    html = response.content.decode()
    assert 'id="range-error"' in html and message.replace("'", "&#x27;") in html
    assert not error.tables  # no tables of a range that is not one
    assert 'name="since"' in html  # the form, to put it right


# Times beyond what a datetime holds (issue 31): each answered 500 (OverflowError) before.
OVERFLOWING = ["since=1e20", "since=inf", "since=-inf", "until=1e300", "since=nan", "since=-1e20",
               "since=99999999999d", "since=9999999999999999999999h", "since=0001-01-01T00:00:00%2B14:00"]


@pytest.mark.parametrize("query", OVERFLOWING)
def test_a_time_that_overflows_is_a_400_on_the_page_the_csvs_and_the_api(viewer, query):
    page = viewer.get(f"/usage/?{query}")
    assert page.status_code == 400 and 'id="range-error"' in page.content.decode()
    for by in ("user", "job", "node"):
        csv_response = viewer.get(f"/usage/{by}.csv?{query}")
        assert csv_response.status_code == 400, (by, csv_response.content)
    api = viewer.get(f"/api/v1/usage?{query}")
    assert api.status_code == 400 and api.json()["error"]


def test_the_idle_allocations_now_longest_first_with_owner_and_price(viewer, redis_client, make_ingest, priced):  # noqa: F811
    ingest = make_ingest()
    now = time.time()
    apply(ingest, node_sample("n2", now - 3 * 3600 - 12 * 60, [(0, [process("erin", "7")], None, 80.0, A100)]))
    for ts in (now - 600, now):
        apply(ingest, node_sample("n1", ts, [(0, [process("dana", "101")], None, 80.0, H100),
                                             (99, [process("alice", "100")], None, 600.0, H100)]))
        apply(ingest, node_sample("n2", ts, [(0, [process("erin", "7")], None, 80.0, A100)]))
    ingest.emit(now)
    html = viewer.get("/usage/").content.decode()
    rows = Tables(html).tables["idle-table"]["body"]
    assert rows == [["n2", "0", "erin", "7", "—", A100, "3 h 12 min", "$1.50"],
                    ["n1", "0", "dana", "101", "—", H100, "10 min", "$1,234.50"]]
    assert '<a href="/nodes/n2/">n2</a>' in html
    assert "2 GPUs, $1,236.00/h" in html


def test_a_checkpoint_dip_of_seconds_is_not_an_idle_allocation_on_the_page_the_api_or_the_kpi(
        viewer, redis_client, make_ingest, settings):  # noqa: F811
    # dana's notebook idle for 11 minutes; alice's training job in a checkpoint's dip for 16 s (issue 32).
    assert settings.GPULSE_IDLE_MIN_SECONDS == 600
    ingest = make_ingest()
    now = time.time()
    apply(ingest, node_sample("n1", now - 660, [(0, [process("dana", "101")], None, 80.0, H100),
                                                (97, [process("alice", "100")], None, 600.0, H100)]))
    for ts in (now - 16, now):
        apply(ingest, node_sample("n1", ts, [(0, [process("dana", "101")], None, 80.0, H100),
                                             (0, [process("alice", "100")], None, 90.0, H100)]))
    ingest.emit(now)
    ingest.use_database(now)
    assert stage_of(ingest, IdleStage).summary() == {"idle_allocated": {"gpus": 1, "usd_per_hour": 3.0}}
    html = viewer.get("/usage/").content.decode()
    assert [row[:4] for row in Tables(html).tables["idle-table"]["body"]] == [["n1", "0", "dana", "101"]]
    assert "1 GPU, $3.00/h" in html and "idle for 10 min or more" in html
    assert [entry["user"] for entry in viewer.get("/api/v1/usage?since=1h").json()["idle_now"]] == ["dana"]

    # The setting says how long is long enough.
    settings.GPULSE_IDLE_MIN_SECONDS = 10
    assert len(Tables(viewer.get("/usage/").content.decode()).tables["idle-table"]["body"]) == 2
    restarted = make_ingest()
    restarted.load_known_nodes()  # it takes the idle list the first one wrote
    apply(restarted, node_sample("n1", now, [(0, [process("dana", "101")], None, 80.0, H100),
                                             (0, [process("alice", "100")], None, 90.0, H100)]))
    restarted.use_database(now)
    assert stage_of(restarted, IdleStage).summary() == {"idle_allocated": {"gpus": 2, "usd_per_hour": 6.0}}


def test_without_idle_allocations_the_page_says_so(viewer, redis_client):
    assert "No GPU has been allocated and idle for 10 min or more." in viewer.get("/usage/").content.decode()


@pytest.mark.parametrize("by", ["user", "job", "node"])
def test_the_csv_holds_the_apis_rows_unrounded(viewer, three_hours, priced, by):  # noqa: F811
    query = f"since={three_hours}&until={three_hours + 3 * 3600}"
    answer = viewer.get(f"/api/v1/usage?by={by}&{query}").json()
    response = viewer.get(f"/usage/{by}.csv?{query}")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    start, end = time.gmtime(three_hours), time.gmtime(three_hours + 3 * 3600)
    stamp = "%Y%m%dT%H%MZ"
    assert response["Content-Disposition"] == (
        f'attachment; filename="gpulse-usage-{by}-{time.strftime(stamp, start)}-{time.strftime(stamp, end)}.csv"')
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(answer["rows"])
    for line, expected in zip(rows, answer["rows"], strict=True):
        assert set(line) == set(expected)
        for key, value in expected.items():
            if isinstance(value, float):
                assert float(line[key]) == value, key  # the same float, every digit
            else:
                assert line[key] == ("" if value is None else str(value)), key


def test_the_csv_keeps_a_nodes_formula_as_text(viewer, make_ingest):  # noqa: F811
    ingest = make_ingest()
    start = (int(time.time()) // 3600 - 2) * 3600
    for step in range(4):
        apply(ingest, node_sample("n1", start + 30 * step, [(90, [held_by(FORMULA, "-1+2")], None, 300.0, H100),
                                                             (90, [held_by("@sum", "\tx")], None, 300.0, H100)],
                                  interval=30.0))
    ingest.flush()
    text = viewer.get(f"/usage/job.csv?since={start}&until={start + 3600}").content.decode()
    rows = {row["user"]: row for row in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"'" + FORMULA, "'@sum"}
    assert rows["'" + FORMULA]["job"] == "'-1+2" and rows["'@sum"]["job"] == "'\tx"


def test_a_csv_of_an_unknown_grouping_or_a_bad_range_is_refused(viewer):
    assert viewer.get("/usage/team.csv").status_code == 404
    response = viewer.get("/usage/user.csv?since=yesterday")
    assert response.status_code == 400 and "not a time: 'yesterday'" in response.content.decode()


def test_a_users_markup_is_shown_as_text(viewer, redis_client, make_ingest):  # noqa: F811
    ingest = make_ingest()
    now = time.time()
    for ts in (now - 3600, now - 1800, now):
        apply(ingest, node_sample("n1", ts, [(0, [held_by(XSS, XSS)], None, 80.0, H100)], interval=1800.0))
    ingest.flush()
    ingest.emit(now)
    html = viewer.get("/usage/?since=2h").content.decode()
    assert XSS not in html
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    tables = Tables(html).tables
    assert tables["usage-user"]["body"][0][0] == XSS  # the parser decodes what the page escaped
    assert tables["idle-table"]["body"][0][2:4] == [XSS, XSS]
    assert html.count(escaped) >= 5  # by user, by job (job and user), idle now (user and job)


def test_every_page_links_to_usage_and_the_overview_has_the_idle_kpi(viewer, admin):
    html = viewer.get("/").content.decode()
    assert '<a href="/usage/">Usage</a>' in html
    assert html.index('href="/health/">Health') < html.index('href="/usage/">Usage')
    assert 'id="kpi-idle"' in html and 'id="kpi-idle-cost"' in html
    page = viewer.get("/usage/").content.decode()
    assert "/admin/usage/gpuprice/" not in page  # the admin links are for staff
    assert "/admin/usage/gpuprice/" in admin.get("/usage/").content.decode()


def test_the_page_shows_the_prices_in_use(viewer, priced, settings):
    settings.GPULSE_PRICE_GPU_HOUR = 2.5
    text = viewer.get("/usage/").content.decode()
    assert f"<dt>{H100}</dt><dd>$1,234.50/GPU-hour</dd>" in text
    assert "<dt>Any other model</dt><dd>$2.50/GPU-hour</dd>" in text
    assert "<dt>Energy</dt><dd>$0.20/kWh</dd>" in text


@pytest.mark.parametrize("seconds, text", [
    (42.9, "42 s"), (12 * 60 + 5, "12 min"), (3 * 3600 + 12 * 60 + 59, "3 h 12 min"), (50 * 3600, "2 d 2 h"),
])
def test_idle_times_read_in_hours_and_minutes(seconds, text):
    assert idle_for(seconds) == text


def test_the_page_says_when_usage_accounting_is_off(viewer, settings):
    assert "accounting-off" not in viewer.get("/usage/").content.decode()
    settings.GPULSE_USAGE_ACCOUNTING = False
    page = viewer.get("/usage/").content.decode()
    assert 'id="accounting-off"' in page and "GPULSE_USAGE_ACCOUNTING=false" in page
