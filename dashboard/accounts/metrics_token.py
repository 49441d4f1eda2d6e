"""The /metrics scrape token (GPULSE_METRICS_TOKEN): a credential that is no user's API token."""

import hmac

from django.conf import settings
from django.urls import reverse


def presents_metrics_token(request) -> bool:
    """Return whether the request is for /metrics with ``Authorization: Bearer <GPULSE_METRICS_TOKEN>``.

    The API-token middleware lets such a request through to the view instead
    of looking the token up as a user's API token.
    """
    token = settings.GPULSE_METRICS_TOKEN
    if not token or request.path != reverse("metrics"):
        return False
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    # Constant time: how much of a guess matches must not show in the response time.
    return scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), token.encode())
