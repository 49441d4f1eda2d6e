"""Helpers the apps' JSON APIs share: one shape of error, one way to read a body and a time."""

import datetime as dt
import json
import math

from django.http import JsonResponse

RELATIVE_UNITS = {"m": 60, "h": 3600, "d": 86400}


class BadRequest(Exception):
    pass


def json_error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def form_error(form) -> JsonResponse:
    """400 naming the first invalid field, with every field's errors under "errors"."""
    errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
    first_field, messages = next(iter(errors.items()))
    label = "request" if first_field == "__all__" else first_field
    return JsonResponse({"error": f"{label}: {messages[0]}", "errors": errors}, status=400)


def json_body(request, allowed: list[str]) -> dict:
    """Return the request's JSON object; raise BadRequest for bad JSON or a field not in ``allowed``.

    An "id" field is accepted and dropped, so a client may send back what it read.
    """
    try:
        data = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(data) - set(allowed) - {"id"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field (fields: {', '.join(allowed)})")
    data.pop("id", None)
    return data


def parse_time(value: str | None, default: dt.datetime) -> dt.datetime:
    """Accept unix seconds, ISO 8601, or a span back from now like "15m", "6h", "7d"; return it in UTC.

    Every bad value raises ValueError, the caller's 400: one that does not parse, and one a
    datetime cannot hold (1e20, inf, nan, 99999999999d), which Python raises as OverflowError.
    """
    if not value:
        return default
    hint = "(use unix seconds, ISO 8601, or a span like 15m, 6h, 7d)"
    out_of_range = f"out of range: {value!r} is not a time between the years 1 and 9999 {hint}"
    now = dt.datetime.now(dt.UTC)
    if value[-1] in RELATIVE_UNITS and value[:-1].isdigit():
        try:
            return now - dt.timedelta(seconds=int(value[:-1]) * RELATIVE_UNITS[value[-1]])
        except OverflowError:
            raise ValueError(out_of_range) from None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(out_of_range)
        try:
            return dt.datetime.fromtimestamp(seconds, dt.UTC)
        except (OverflowError, OSError, ValueError):  # beyond time_t, or beyond year 9999
            raise ValueError(out_of_range) from None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not a time: {value!r} {hint}") from None
    if not parsed.tzinfo:
        return parsed.replace(tzinfo=dt.UTC)
    try:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
        return parsed.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError(out_of_range) from None
