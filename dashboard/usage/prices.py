"""Prices: per GPU model and per kWh from the admin, else the environment's defaults."""

from dataclasses import dataclass

from django.conf import settings

from dashboard.usage.models import EnergyPrice, GpuPrice


@dataclass(frozen=True)
class Prices:
    per_gpu_hour: dict[str, float]  # GPU model -> $/GPU-hour, where the admin set one
    default_gpu_hour: float
    per_kwh: float

    def gpu_hour(self, model: str) -> float:
        return self.per_gpu_hour.get(model, self.default_gpu_hour)

    def as_dict(self) -> dict:
        return {"usd_per_gpu_hour": self.per_gpu_hour, "default_usd_per_gpu_hour": self.default_gpu_hour,
                "usd_per_kwh": self.per_kwh}


def current_prices() -> Prices:
    energy = EnergyPrice.objects.first()
    return Prices(
        per_gpu_hour={row.gpu_model: float(row.usd_per_gpu_hour) for row in GpuPrice.objects.all()},
        default_gpu_hour=settings.GPULSE_PRICE_GPU_HOUR,
        per_kwh=float(energy.usd_per_kwh) if energy is not None else settings.GPULSE_PRICE_KWH,
    )
