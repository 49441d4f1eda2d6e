"""Helpers the apps' JSON APIs share: one shape of error, one way to read a body."""

import json

from django.http import JsonResponse


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
