from django.contrib import admin

from dashboard.usage.models import EnergyPrice, GpuPrice


@admin.register(GpuPrice)
class GpuPriceAdmin(admin.ModelAdmin):
    list_display = ("gpu_model", "usd_per_gpu_hour")


@admin.register(EnergyPrice)
class EnergyPriceAdmin(admin.ModelAdmin):
    list_display = ("usd_per_kwh",)
