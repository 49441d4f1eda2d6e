"""Prices: per GPU model from the admin, else a built-in default for the model's family, else the
environment's; per kWh from the admin, else the environment's."""

import re
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Case, FloatField, Q, Value, When
from django.db.models.expressions import Combinable

from dashboard.usage.models import EnergyPrice, GpuPrice


@dataclass(frozen=True)
class FamilyPrice:
    """A default $/GPU-hour for every model whose name holds each of ``marks`` as whole words (any case)."""

    family: str  # what the usage page calls it
    marks: tuple[str, ...]
    usd_per_gpu_hour: float

    def patterns(self) -> list[str]:
        # A mark between non-alphanumerics or the ends: "A10" is not in "A100", "H200" not in "GH200".
        # Only anchors and bracket expressions: Python's re (SQLite) and PostgreSQL read them alike.
        return [f"(^|[^a-z0-9]){mark.lower()}($|[^a-z0-9])" for mark in self.marks]

    def fits(self, model: str) -> bool:
        return all(re.search(pattern, model, re.IGNORECASE) for pattern in self.patterns())

    def sql(self, column: str) -> Q:
        return Q(*(Q(**{f"{column}__iregex": pattern}) for pattern in self.patterns()))


# List-price-like defaults: about what one GPU-hour of each family costs on demand from the public
# clouds and GPU clouds (late 2025, rounded), so that a cluster's usage is priced by model before
# anyone has set its own prices. They are no one's contract: set your own in the admin (GPU-hour
# prices, per model name as the GPUs report it), which take precedence. The first family that fits
# a model prices it, so "A100 80GB" comes before "A100".
FAMILY_PRICES = (
    FamilyPrice("GB200", ("GB200",), 6.50),
    FamilyPrice("B200", ("B200",), 5.50),
    FamilyPrice("GH200", ("GH200",), 3.50),
    FamilyPrice("H200", ("H200",), 3.80),
    FamilyPrice("H100", ("H100",), 3.00),
    FamilyPrice("A100 80GB", ("A100", "80GB"), 1.80),
    FamilyPrice("A100 40GB", ("A100",), 1.40),
    FamilyPrice("L40S", ("L40S",), 1.00),
    FamilyPrice("L40", ("L40",), 0.90),
    FamilyPrice("L4", ("L4",), 0.70),
    FamilyPrice("RTX 6000 Ada", ("RTX 6000 Ada",), 0.90),
    FamilyPrice("A10G", ("A10G",), 1.00),
    FamilyPrice("A10", ("A10",), 0.75),
    FamilyPrice("V100", ("V100",), 0.90),
    FamilyPrice("T4", ("T4",), 0.35),
)


@dataclass(frozen=True)
class Prices:
    per_gpu_hour: dict[str, float]  # GPU model -> $/GPU-hour, where the admin set one
    default_gpu_hour: float  # a model neither the admin nor FAMILY_PRICES prices
    per_kwh: float
    families: tuple[FamilyPrice, ...] = FAMILY_PRICES

    def gpu_hour(self, model: str) -> float:
        if model in self.per_gpu_hour:
            return self.per_gpu_hour[model]
        family = next((family for family in self.families if family.fits(model)), None)
        return self.default_gpu_hour if family is None else family.usd_per_gpu_hour

    def gpu_hour_sql(self, column: str) -> Combinable:
        """gpu_hour() of the rows' ``column`` (the GPU model) as a SQL expression, so groups are priced in
        the query: the admin's exact names, then the families in order, then the default."""
        return Case(*(When(Q(**{column: model}), then=Value(usd)) for model, usd in self.per_gpu_hour.items()),
                    *(When(family.sql(column), then=Value(family.usd_per_gpu_hour)) for family in self.families),
                    default=Value(self.default_gpu_hour), output_field=FloatField())

    def as_dict(self) -> dict:
        return {"usd_per_gpu_hour": self.per_gpu_hour,
                "usd_per_gpu_hour_by_family": {family.family: family.usd_per_gpu_hour for family in self.families},
                "default_usd_per_gpu_hour": self.default_gpu_hour, "usd_per_kwh": self.per_kwh}


def current_prices() -> Prices:
    energy = EnergyPrice.objects.first()
    return Prices(
        per_gpu_hour={row.gpu_model: float(row.usd_per_gpu_hour) for row in GpuPrice.objects.all()},
        default_gpu_hour=settings.GPULSE_PRICE_GPU_HOUR,
        per_kwh=float(energy.usd_per_kwh) if energy is not None else settings.GPULSE_PRICE_KWH,
    )
