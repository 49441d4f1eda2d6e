from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import JsonResponse
from django.utils import timezone

from dashboard.accounts.metrics_token import presents_metrics_token
from dashboard.accounts.models import ApiToken, hash_token


class BearerTokenMiddleware:
    """Authenticate `Authorization: Bearer <token>` requests as the token's user.

    A bearer token is not an ambient credential a browser sends on its own, so
    token requests skip the CSRF check that protects session cookies.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and not presents_metrics_token(request):
            token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(header[7:].strip())).first()
            if token is None or not token.user.is_active:
                return JsonResponse({"error": "invalid or revoked API token"}, status=401)
            ApiToken.objects.filter(pk=token.pk).update(last_used=timezone.now())
            request.user = token.user
            request._dont_enforce_csrf_checks = True
        return self.get_response(request)


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Everything needs login; the JSON API answers 401 instead of redirecting."""

    def handle_no_permission(self, request, view_func):
        if request.path.startswith("/api/"):
            return JsonResponse({"error": "authentication required (session or Bearer token)"}, status=401)
        return super().handle_no_permission(request, view_func)
