"""The /usage/ page and its CSV downloads: who held the GPUs over a range, and what the idle ones cost."""

import csv
import datetime as dt

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.usage.api import parse_range
from dashboard.usage.idle import MAX_LISTED
from dashboard.usage.prices import current_prices
from dashboard.usage.report import GROUPINGS, MIG_PROFILE, allocation_series, idle_now, usage_table

RANGES = (("24h", "24 h"), ("7d", "7 d"), ("30d", "30 d"))
DEFAULT_RANGE = "7d"  # what parse_range takes without a since
TITLES = {"user": "By user", "job": "By job", "node": "By node"}
FIGURES = ("gpu_hours", "busy_pct", "busy_by", "idle_gpu_hours", "idle_cost", "cost", "kwh", "energy_cost")
TOP_IDLE = 25
PAGE_ROWS = 100  # the costliest groups a table shows; a month holds 100,000 jobs, which the CSV has
# Rows of a table laid out as the page opens; the rest wait in a <template> for later-rows.js. As
# the page opened, By job's 100 rows were most of its first layout (issue 18, docs/PERFORMANCE.md).
FIRST_ROWS = 25
# A spreadsheet reads a cell starting with one of these as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _columns(by: str, mig: bool = True) -> tuple[str, ...]:
    """A table's columns; ``mig``: with the MIG profile (the CSV's always are: last, where a spreadsheet
    made before it was there does not look)."""
    return (*GROUPINGS[by], *(("allocated_pct",) if by == "node" else ()), *FIGURES, *((MIG_PROFILE,) if mig else ()))


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


@require_GET
def usage_page(request):
    query = request.GET
    context = {"ranges": RANGES, "since": query.get("since", ""), "until": query.get("until", ""),
               "selected": "" if query.get("until") else query.get("since") or DEFAULT_RANGE,
               "accounting": settings.GPULSE_USAGE_ACCOUNTING, "idle_min_seconds": settings.GPULSE_IDLE_MIN_SECONDS}
    try:
        since, until = parse_range(query)
        prices = current_prices()
        tables = [usage_table(by, since, until, prices, limit=PAGE_ROWS) for by in GROUPINGS]
    except ValueError as exc:  # a time that does not parse, or a range that is empty or too long
        return render(request, "usage/usage.html", {**context, "error": str(exc)}, status=400)
    # Every table covers the same whole hours: the chart and the CSV links take them too.
    start, end = tables[0]["since"], tables[0]["until"]
    idle = idle_now(prices, limit=MAX_LISTED)
    series = allocation_series(_utc(start), _utc(end))
    return render(request, "usage/usage.html", {
        **context,
        "start": _utc(start), "end": _utc(end), "range_query": f"since={start:.0f}&until={end:.0f}",
        "tables": [_shown(table) for table in tables],
        "idle": idle[:TOP_IDLE], "idle_count": len(idle), "idle_usd_per_hour": sum(e["usd_per_hour"] for e in idle),
        "chart": {"since": start, "until": end, **series},
        "prices": prices,
    })


def _shown(table: dict) -> dict:
    """A table as the template walks it: each row's group (user; job, pod, user; node) as a list, the
    first FIRST_ROWS rows apart from the later ones; the MIG column only where a row is a MIG instance's."""
    names = GROUPINGS[table["by"]]
    rows = [{**row, "group": [row[name] for name in names]} for row in table["rows"]]
    mig = any(row[MIG_PROFILE] for row in rows)
    return {**table, "title": TITLES[table["by"]], "names": names, "mig": mig,
            "width": len(_columns(table["by"], mig)), "cut": len(rows) == PAGE_ROWS, "rows": rows[:FIRST_ROWS],
            "later_rows": rows[FIRST_ROWS:]}


def _defused(value):
    """A node's text as text to a spreadsheet, never a formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


@require_GET
def usage_csv(request, by):
    if by not in GROUPINGS:
        raise Http404(f"usage is by {', '.join(GROUPINGS)}, not {by!r}")
    try:
        since, until = parse_range(request.GET)
        table = usage_table(by, since, until, current_prices())
    except ValueError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    stamps = [_utc(table[key]).strftime("%Y%m%dT%H%MZ") for key in ("since", "until")]
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gpulse-usage-{by}-{stamps[0]}-{stamps[1]}.csv"'
    columns = _columns(by)
    writer = csv.writer(response)
    writer.writerow(columns)
    # Numbers as Python writes a float, unrounded: the API's figures to the last digit. None is "".
    writer.writerows([_defused(row[column]) for column in columns] for row in table["rows"])
    return response
