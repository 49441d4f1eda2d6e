"""Staff mark maintenance here: a window makes the incidents starting in it planned, and an incident
a person knows was planned (a drain for maintenance) is marked so by hand."""

from django.contrib import admin

from dashboard.reliability.models import Incident, MaintenanceWindow


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ("node", "component", "gpu", "start", "end", "planned", "planned_by", "source")
    list_filter = ("planned", "source", "component")
    list_editable = ("planned",)
    search_fields = ("node", "cause")


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(admin.ModelAdmin):
    list_display = ("node", "start", "end", "note")
