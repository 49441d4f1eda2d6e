"""Who a failed login counts against, for django-axes' lockout (settings.AXES_*).

Failures are counted per (username, client address): one client guessing
cannot lock the user out from elsewhere, and one address (a proxy, an office
NAT) failing for many names locks nobody else out. The address is
REMOTE_ADDR, which uvicorn takes from X-Forwarded-For only when the request
comes from a proxy in its --forwarded-allow-ips.
"""

import unicodedata

from django.conf import settings


def normalise_username(username: str) -> str:
    """Fold every spelling that can log in as one user onto one key.

    Django's login form applies NFKC and strips spaces before authenticating
    (" alice" and "ａｌｉｃｅ" log in as alice); casefolding as well makes
    "ALICE" share alice's count, so no spelling gets fresh attempts.
    """
    return unicodedata.normalize("NFKC", username).strip().casefold()


def lockout_username(request, credentials: dict | None) -> str:
    """AXES_USERNAME_CALLABLE: the normalised username of a login attempt."""
    field = settings.AXES_USERNAME_FORM_FIELD
    username = (credentials or {}).get(field)
    if username is None and request is not None:
        username = request.POST.get(field)
    return normalise_username(username or "")
