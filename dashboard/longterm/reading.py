"""The node history's long-term part: ranges older than the local retention, read from the store that remote
write feeds, through its PromQL API (/api/v1/query_range), as the database's rows look.

For each rolled-up metric and each of min, avg and max, one query of
``<fn>_over_time(<name>{node="..."}[step] offset 1ms)`` at the history's resolution: evaluated at the end of each
bucket, so its window is the bucket (its start included, its end not, as a rollup's minute or hour), and set
back by a step so its points carry the bucket's start, as rollup rows do. Values come back in /metrics' units
and are put back in the rollups' (utilization in %, not 0-1).

The store is another system's answer: its size is bounded (points per series, series per query, bytes), every
value checked, and a failure of any kind leaves the database's rows as they are, with the reason in the answer.
"""

import datetime as dt
import http.client
import logging
import math
import time
import urllib.parse

import orjson
from django.conf import settings

from dashboard.live.models import ROLLUP_METRICS
from dashboard.longterm.store import StoreURL, StoreURLError, auth_headers, connect, parse_store_url, read_limited
from dashboard.metrics import GPU_GAUGES
from gpulse.schema import MAX_GPU_INDEX, MAX_GPUS

log = logging.getLogger(__name__)

FUNCTIONS = ("min", "avg", "max")
# Prometheus refuses a query_range of more points per series (11,000); older buckets past it are left out.
MAX_POINTS = 11_000
ANSWER_LIMIT = 64 * 1024 * 1024


class StoreError(Exception):
    """The store could not answer; the message says why, in words a person reading the page can use."""


def bucket_range(since: float, until: float, step: int) -> tuple[int, int, bool]:
    """The first and last bucket starts within since..until (until excluded) on the step's grid, at most
    MAX_POINTS of them (the newest), and whether older ones were left out."""
    first = math.ceil(since / step) * step
    last = math.ceil(until / step) * step - step
    if (last - first) // step + 1 > MAX_POINTS:
        return last - (MAX_POINTS - 1) * step, last, True
    return first, last, False


def promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class StoreReader:
    def __init__(self, url: StoreURL, timeout: float):
        self.url = url
        self.deadline = time.monotonic() + timeout
        self.headers = {**auth_headers(), "Accept": "application/json"}

    def query_range(self, query: str, start: int, end: int, step: int) -> list:
        """The matrix the store answers; raise StoreError."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StoreError(f"no answer within {settings.GPULSE_HISTORY_PROMQL_TIMEOUT:g} s")
        params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step})
        connection = connect(self.url, left)
        try:
            connection.request("GET", f"{self.url.path}/api/v1/query_range?{params}", headers=self.headers)
            response = connection.getresponse()
            body = read_limited(response, ANSWER_LIMIT)
        except TimeoutError:
            raise StoreError(f"no answer within {settings.GPULSE_HISTORY_PROMQL_TIMEOUT:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise StoreError(f"unreachable ({exc})") from None
        finally:
            connection.close()
        if 300 <= response.status < 400:
            raise StoreError(f"it answered HTTP {response.status} (a redirect, which is not followed)")
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise StoreError(f"it answered HTTP {response.status} with something other than JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, dict) else None
            raise StoreError(f"it answered HTTP {response.status}: {str(error or 'no result')[:300]}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise StoreError("its answer is not a range query's matrix")
        return data["result"]


def _points(series: dict, step: int) -> tuple[int, list[tuple[int, float]]] | None:
    """One answered series as (gpu, [(bucket start, value)]); None when it is not one gpulse wrote."""
    labels, values = series.get("metric"), series.get("values")
    if not isinstance(labels, dict) or not isinstance(values, list):
        return None
    gpu = labels.get("gpu")
    if not isinstance(gpu, str) or not gpu.isdigit() or int(gpu) > MAX_GPU_INDEX:
        return None
    points = []
    for point in values[:MAX_POINTS]:
        try:
            at, value = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(at) and math.isfinite(value):
            points.append((round(at) - step, value))
    return int(gpu), points


def read_store(reader: StoreReader, node: str, first: int, last: int, step: int) -> dict[int, dict[int, list]]:
    """gpu -> bucket start -> per metric of ROLLUP_METRICS, [min, mean, max] in the rollups' units."""
    found: dict[int, dict[int, list]] = {}
    for position, metric in enumerate(ROLLUP_METRICS):
        name, convert, _ = GPU_GAUGES[metric]
        scale = convert(1.0)  # every conversion is a factor: back to the rollups' unit by dividing by it
        for slot, function in enumerate(FUNCTIONS):
            query = f"{function}_over_time({name}{{node={promql_string(node)}}}[{step}s] offset 1ms)"
            for series in reader.query_range(query, first + step, last + step, step)[:MAX_GPUS]:
                parsed = _points(series, step) if isinstance(series, dict) else None
                if parsed is None:
                    continue
                gpu, points = parsed
                buckets = found.setdefault(gpu, {})
                for start, value in points:
                    if first <= start <= last:
                        row = buckets.setdefault(start, [[None] * 3 for _ in ROLLUP_METRICS])
                        if row[position][slot] is None:  # a GPU whose uuid changed has two series: the first wins
                            row[position][slot] = round(value / scale, 6)
    return found


def merge(series: dict[int, dict], found: dict[int, dict[int, list]]) -> int:
    """Add the store's buckets to the database's series (a bucket the database has is kept as it is); return
    the buckets added."""
    added = 0
    for gpu, buckets in found.items():
        entry = series.setdefault(gpu, {"gpu": gpu, "ts": [], **{m: [] for m in ROLLUP_METRICS}})
        have = {int(ts) for ts in entry["ts"]}
        rows = [(ts, [entry[m][i] for m in ROLLUP_METRICS]) for i, ts in enumerate(entry["ts"])]
        fresh = [(float(start), values) for start, values in buckets.items() if start not in have]
        added += len(fresh)
        rows = sorted(rows + fresh, key=lambda row: row[0])
        entry["ts"] = [ts for ts, _ in rows]
        for position, metric in enumerate(ROLLUP_METRICS):
            entry[metric] = [values[position] for _, values in rows]
    return added


def store_history(node: str, since: dt.datetime, until: dt.datetime, step: int, series: dict[int, dict]) -> dict:
    """Merge into ``series`` (the database's, by GPU) the store's buckets within since..until (until excluded:
    where the local rows begin); return what the history says of where its points came from."""
    first, last, truncated = bucket_range(since.timestamp(), until.timestamp(), step)
    note: dict[str, object] = {"until": until.timestamp(), "points": 0, "truncated": truncated, "error": None}
    try:
        url = parse_store_url(settings.GPULSE_HISTORY_PROMQL_URL, "GPULSE_HISTORY_PROMQL_URL")
        if last >= first:
            found = read_store(StoreReader(url, settings.GPULSE_HISTORY_PROMQL_TIMEOUT), node, first, last, step)
            note["points"] = merge(series, found)
    except (StoreError, StoreURLError) as exc:
        note["error"] = f"the long-term store could not be read: {exc}; showing the database's rows only"
        log.warning("node %s history: %s", node, note["error"])
        return {"source": "database", "store": note}
    return {"source": "store+database", "store": note}
