from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dashboard.healthz.checks import health


@login_not_required
@require_GET
def healthz(request):
    ok, checks = health()
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)
