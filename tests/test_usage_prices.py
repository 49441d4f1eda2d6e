"""Prices per GPU model: the admin's, else the model family's list-price-like default, else
GPULSE_PRICE_GPU_HOUR; the same in Python (the idle KPI, idle now) and in SQL (the usage tables)."""

import datetime as dt

import pytest

from dashboard.live.models import UsageHour
from dashboard.usage.models import GpuPrice
from dashboard.usage.prices import current_prices
from dashboard.usage.report import usage_table

pytestmark = pytest.mark.django_db

# Model names as NVML reports them, and what a GPU-hour of each costs without an admin price.
NAMED = [
    ("NVIDIA H100 80GB HBM3", 3.00), ("NVIDIA H100 PCIe", 3.00), ("NVIDIA H100 NVL", 3.00),
    ("NVIDIA H200", 3.80), ("NVIDIA GH200 480GB", 3.50), ("NVIDIA B200", 5.50), ("NVIDIA GB200", 6.50),
    ("NVIDIA A100-SXM4-80GB", 1.80), ("NVIDIA A100 80GB PCIe", 1.80), ("NVIDIA A100-SXM4-40GB", 1.40),
    ("NVIDIA A100-PCIE-40GB", 1.40), ("NVIDIA L40S", 1.00), ("NVIDIA L40", 0.90), ("NVIDIA L4", 0.70),
    ("NVIDIA A10G", 1.00), ("NVIDIA A10", 0.75), ("NVIDIA RTX 6000 Ada Generation", 0.90),
    ("Tesla V100-SXM2-16GB", 0.90), ("Tesla T4", 0.35),
    # Names that hold a family's letters but are not of it: GPULSE_PRICE_GPU_HOUR.
    ("NVIDIA RTX A1000", 2.50), ("NVIDIA T400", 2.50), ("Quadro T4000", 2.50), ("", 2.50),
]


@pytest.fixture
def default_price(settings):
    settings.GPULSE_PRICE_GPU_HOUR = 2.50


@pytest.mark.parametrize("model, usd", NAMED)
def test_each_known_model_has_its_familys_default_price(default_price, model, usd):
    assert current_prices().gpu_hour(model) == usd


def test_the_usage_tables_price_each_model_as_the_kpi_does_and_the_admins_price_wins(default_price):
    hour = dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC)
    for number, (model, _usd) in enumerate(NAMED):
        UsageHour.objects.create(hour=hour, node=f"n{number}", model=model, samples=3600, seconds=3600.0,
                                 allocated_seconds=3600.0, busy_seconds=0.0, energy_j=0.0)
    GpuPrice.objects.create(gpu_model="NVIDIA L40S", usd_per_gpu_hour="1.25")
    prices = current_prices()
    table = usage_table("node", hour, hour + dt.timedelta(hours=1), prices)
    cost = {row["node"]: row["cost"] for row in table["rows"]}
    expected = {f"n{number}": 1.25 if model == "NVIDIA L40S" else usd for number, (model, usd) in enumerate(NAMED)}
    assert cost == pytest.approx(expected)
    assert cost == pytest.approx({f"n{number}": prices.gpu_hour(model) for number, (model, _usd) in enumerate(NAMED)})


def test_the_usage_page_lists_the_family_defaults_as_defaults_to_override(viewer):
    page = viewer.get("/usage/").content.decode()
    assert "<dt>H100</dt><dd>$3.00/GPU-hour</dd>" in page and "<dt>L40S</dt><dd>$1.00/GPU-hour</dd>" in page
    assert "list-price-like, not your contract" in page
    assert viewer.get("/api/v1/usage").json()["prices"]["usd_per_gpu_hour_by_family"]["H200"] == 3.80
