from django.core.validators import MinValueValidator
from django.db import models


class GpuPrice(models.Model):
    """What a GPU-hour of one model costs; a model without a row costs its family's default
    (dashboard/usage/prices.py FAMILY_PRICES), else GPULSE_PRICE_GPU_HOUR."""

    gpu_model = models.CharField(max_length=128, unique=True,
                                 help_text="the model name as the GPUs report it, e.g. NVIDIA H100 80GB HBM3")
    usd_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(0)])

    class Meta:
        verbose_name = "GPU-hour price"

    def __str__(self):
        return f"{self.gpu_model}: ${self.usd_per_gpu_hour}/GPU-hour"


class EnergyPrice(models.Model):
    """What a kWh costs; without a row, GPULSE_PRICE_KWH. One row at most."""

    usd_per_kwh = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(0)])

    class Meta:
        verbose_name = "energy price"
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="one_energy_price")]

    def save(self, *args, **kwargs):
        self.pk = 1
        super().save(*args, **kwargs)

    def __str__(self):
        return f"${self.usd_per_kwh}/kWh"
