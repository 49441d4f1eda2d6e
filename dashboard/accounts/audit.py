"""Record who launched, cancelled, muted or changed what."""

from dashboard.accounts.models import AuditEvent


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None


def audit(request, action: str, target: str, *, actor: str = "", **detail) -> AuditEvent:
    """Write one audit row for the request's user, or for ``actor`` when gpulse itself acted
    (no request: e.g. a drain); ``detail`` must be JSON-serialisable."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        user = None
    return AuditEvent.objects.create(
        user=user,
        username=user.get_username() if user is not None else actor,
        action=action,
        target=target,
        detail=detail,
        ip=client_ip(request),
    )
