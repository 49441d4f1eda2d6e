"""The simulator page: inject faults into the simulated fleet, list the active ones."""

import redis
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render

from dashboard.accounts.audit import audit
from dashboard.simulator import faults
from dashboard.simulator.forms import FaultForm


def panel(request):
    if not request.user.is_staff:
        raise PermissionDenied("the simulator panel is for staff users")
    form = FaultForm()
    status = 200
    if request.method == "POST":
        form = FaultForm(request.POST)
        status = 400
        if form.is_valid():
            node, gpu, fault = (form.cleaned_data[k] for k in ("node", "gpu", "fault"))
            target = node if gpu is None else f"{node} GPU {gpu}"
            try:
                faults.set_fault(node, gpu, fault)
            except faults.FaultRefused as exc:
                form.add_error(exc.field, str(exc))
            except redis.RedisError as exc:
                messages.error(request, f"Redis is unreachable, the fault was not set: {exc}")
                return redirect("simulator:panel")
            else:
                audit(request, "simulator.fault", node if gpu is None else f"{node}/{gpu}", fault=fault)
                messages.success(request, f"{target}: {'faults cleared' if fault == 'clear' else fault + ' injected'}.")
                return redirect("simulator:panel")
    try:
        active = sorted(faults.active_faults().items())
    except redis.RedisError as exc:
        active = []
        messages.error(request, f"Redis is unreachable: {exc}")
    return render(request, "simulator/panel.html", {"form": form, "faults": active}, status=status)
