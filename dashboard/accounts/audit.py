"""Record who launched, cancelled, muted or changed what."""

from dashboard.accounts.models import AuditEvent


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None


def audit(request, action: str, target: str, **detail) -> AuditEvent:
    """Write one audit row for the request's user; ``detail`` must be JSON-serialisable."""
    user = getattr(request, "user", None)
    return AuditEvent.objects.create(
        user=user if user is not None and user.is_authenticated else None,
        username=user.get_username() if user is not None and user.is_authenticated else "",
        action=action,
        target=target,
        detail=detail,
        ip=client_ip(request),
    )
