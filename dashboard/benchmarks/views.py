from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.benchmarks.models import BenchmarkJob


@require_GET
def job_list(request):
    return render(request, "benchmarks/list.html", {"jobs": BenchmarkJob.objects.all()[:100]})
