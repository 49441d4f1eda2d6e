"""GET /api/v1/usage?by=user|job|node&since=7d&until=…&limit=1000: the usage page's numbers, the
costliest ``limit`` groups and the totals of all (authentication: dashboard.accounts.middleware)."""

import datetime as dt

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dashboard.json_api import parse_time
from dashboard.usage.prices import current_prices
from dashboard.usage.report import GROUPINGS, idle_now, usage_table

DEFAULT_SPAN = dt.timedelta(days=7)
DEFAULT_LIMIT, MAX_LIMIT = 1000, 100_000


def parse_range(query) -> tuple[dt.datetime, dt.datetime]:
    """since/until from a query (unix seconds, ISO 8601 or a span back like 24h, 7d); ValueError says why."""
    now = dt.datetime.now(dt.UTC)
    return parse_time(query.get("since"), default=now - DEFAULT_SPAN), parse_time(query.get("until"), default=now)


@require_GET
def usage(request):
    by = request.GET.get("by", "user")
    if by not in GROUPINGS:
        return JsonResponse({"error": f"'by' is one of {', '.join(GROUPINGS)}, not {by!r}"}, status=400)
    limit = request.GET.get("limit", str(DEFAULT_LIMIT))
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
        return JsonResponse({"error": f"'limit' is a whole number from 1 to {MAX_LIMIT}, not {limit!r}"}, status=400)
    try:
        since, until = parse_range(request.GET)
        prices = current_prices()
        table = usage_table(by, since, until, prices, limit=int(limit))
    except ValueError as exc:  # a time that does not parse, or a range that is empty or too long (BadRange)
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({**table, "idle_now": idle_now(prices)})
