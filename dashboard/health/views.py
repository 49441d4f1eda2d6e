from django.shortcuts import render
from django.views.decorators.http import require_GET


@require_GET
def health_list(request):
    return render(request, "live/health.html")
