"""Import a site's incident history: a CSV of incidents and the window (nodes, since, until) it covers.

The CSV's header names its columns: start, node and component, and any of
gpu, end, planned and cause. Components are kept as written. Every line is
checked before anything is written, so a file with one bad line imports
nothing, and ImportRefused names the line and the field.
"""

import csv
import datetime as dt
import io

from django.db import transaction

from dashboard.reliability.models import Exposure, Incident
from gpulse.schema import MAX_GPU_INDEX

REQUIRED = ("start", "node", "component")
OPTIONAL = ("gpu", "end", "planned", "cause")
TRUE, FALSE = ("true", "yes", "1"), ("false", "no", "0", "")
MAX_LINES = 1_000_000
MAX_WINDOW_NODES = 10_000_000
LENGTHS = {name: Incident._meta.get_field(name).max_length for name in ("node", "component", "cause")}


class ImportRefused(ValueError):
    pass


def parse_instant(value: str, what: str) -> dt.datetime:
    """An ISO 8601 time (UTC when it names no zone)."""
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ImportRefused(f"{what}: not an ISO 8601 time: {value[:40]!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def parse_window(nodes: str | None, since: str | None, until: str | None):
    """(nodes, since, until) of the watched window, or None when none of the three is given."""
    if not nodes and not since and not until:
        return None
    if not nodes or not since or not until:
        missing = next(name for name, value in (("nodes", nodes), ("since", since), ("until", until)) if not value)
        raise ImportRefused(f"{missing}: required with the window's other fields (nodes, since, until)")
    if not nodes.isdigit() or not 1 <= int(nodes) <= MAX_WINDOW_NODES:
        raise ImportRefused(f"nodes: a whole number from 1 to {MAX_WINDOW_NODES}, not {nodes[:40]!r}")
    start, end = parse_instant(since, "since"), parse_instant(until, "until")
    if end <= start:
        raise ImportRefused("until: must be after since")
    return int(nodes), start, end


def _text(row: dict, name: str, line: int, required: bool) -> str:
    value = (row.get(name) or "").strip()
    if required and not value:
        raise ImportRefused(f"line {line}: {name}: required")
    if len(value) > LENGTHS[name]:
        raise ImportRefused(f"line {line}: {name}: longer than {LENGTHS[name]} characters")
    return value


def parse_row(row: dict, line: int, window) -> Incident:
    start = parse_instant(row["start"] or "", f"line {line}: start")
    if window is not None and not window[1] <= start < window[2]:
        raise ImportRefused(f"line {line}: start: outside the window since–until")
    end = None
    if (row.get("end") or "").strip():
        end = parse_instant(row["end"], f"line {line}: end")
        if end < start:
            raise ImportRefused(f"line {line}: end: before start")
    gpu = (row.get("gpu") or "").strip()
    if gpu and (not gpu.isdigit() or int(gpu) > MAX_GPU_INDEX):
        raise ImportRefused(f"line {line}: gpu: a GPU index from 0 to {MAX_GPU_INDEX}, not {gpu[:40]!r}")
    planned = (row.get("planned") or "").strip().lower()
    if planned not in TRUE + FALSE:
        raise ImportRefused(f"line {line}: planned: true or false, not {planned[:40]!r}")
    return Incident(
        node=_text(row, "node", line, True), component=_text(row, "component", line, True),
        gpu=int(gpu) if gpu else None, cause=_text(row, "cause", line, False), start=start, end=end,
        planned=planned in TRUE, source=Incident.IMPORTED,
    )


def parse_csv(data: bytes, window) -> list[Incident]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportRefused(f"file: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise ImportRefused(f"line 1: {missing[0]}: missing column (the header starts start,node,component)")
    unknown = [name for name in header if name not in REQUIRED + OPTIONAL]
    if unknown:
        raise ImportRefused(f"line 1: {unknown[0][:40]}: unknown column (columns: {', '.join(REQUIRED + OPTIONAL)})")
    reader.fieldnames = header
    incidents = []
    for row in reader:
        line = reader.line_num
        if None in row:
            raise ImportRefused(f"line {line}: more fields than the header names")
        if line > MAX_LINES:
            raise ImportRefused(f"line {line}: file: more than {MAX_LINES} lines")
        incidents.append(parse_row(row, line, window))
    return incidents


def import_csv(data: bytes, nodes: str | None, since: str | None, until: str | None) -> dict:
    """Check everything, then write it all in one transaction; return what was imported."""
    window = parse_window(nodes, since, until)
    incidents = parse_csv(data, window)
    node_hours = 0.0
    with transaction.atomic():
        Incident.objects.bulk_create(incidents, batch_size=1000)
        if window is not None:
            count, start, end = window
            node_hours = count * (end - start).total_seconds() / 3600
            Exposure.objects.create(start=start, end=end, node_hours=node_hours, source=Incident.IMPORTED)
    planned = sum(1 for incident in incidents if incident.planned)
    return {"incidents": len(incidents), "planned": planned, "unexpected": len(incidents) - planned,
            "node_hours": node_hours}
