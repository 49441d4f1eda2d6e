"""The checkpoint planner (GET /api/v1/reliability/plan) and the MTBF interval, against closed forms and
published figures."""

import math

import pytest

from dashboard.reliability import checkpoint
from dashboard.reliability.interval import chi2_quantile, mtbf_interval

pytestmark = pytest.mark.django_db

PLAN = "/api/v1/reliability/plan"


@pytest.mark.parametrize(("job_mtbf_min", "interval_min"), [(24 * 60, 116.7), (6 * 60, 56.7), (15, 9.1)])
def test_dalys_interval_matches_his_worked_figures_for_a_five_minute_checkpoint(job_mtbf_min, interval_min):
    # Daly 2006: δ = 5 min, M the job's (system's) MTBF.
    assert checkpoint.daly_interval(300, job_mtbf_min * 60) / 60 == pytest.approx(interval_min, abs=0.05)


def test_dalys_interval_is_the_mtbf_once_a_checkpoint_takes_twice_as_long():
    assert checkpoint.daly_interval(7200, 3600) == 3600


def test_the_plan_api_gives_the_closed_forms(viewer):
    answer = viewer.get(PLAN, {"nodes": 2048, "hours": 24, "checkpoint_write_s": 300, "node_mtbf_h": 6144}).json()
    job_mtbf_h = 6144 / 2048  # 3 h
    assert answer["job_mtbf_h"] == pytest.approx(job_mtbf_h)
    assert answer["expected_interruptions"] == pytest.approx(24 / job_mtbf_h)
    assert answer["p_interrupt"] == pytest.approx(1 - math.exp(-24 * 2048 / 6144))
    assert answer["young_interval_s"] == pytest.approx(math.sqrt(2 * 300 * job_mtbf_h * 3600))
    ratio = 300 / (2 * job_mtbf_h * 3600)
    daly = math.sqrt(2 * 300 * job_mtbf_h * 3600) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - 300
    assert answer["daly_interval_s"] == pytest.approx(daly)
    # Daly's eq. 13 with no restart time: T_w / T_s = M (e^((τ+δ)/M) − 1) / τ.
    m = job_mtbf_h * 3600
    assert answer["lost_fraction"] == pytest.approx(1 - daly / (m * (math.exp((daly + 300) / m) - 1)))
    assert answer["measured"] is False


def test_daly_figures_through_the_api_for_one_node(viewer):
    answer = viewer.get(PLAN, {"nodes": 1, "hours": 1, "checkpoint_write_s": 300, "node_mtbf_h": 24}).json()
    assert answer["daly_interval_s"] / 60 == pytest.approx(116.7, abs=0.05)


@pytest.mark.parametrize(("query", "field"), [
    ({"hours": 1, "checkpoint_write_s": 60, "node_mtbf_h": 10}, "nodes"),
    ({"nodes": "x", "hours": 1, "checkpoint_write_s": 60, "node_mtbf_h": 10}, "nodes"),
    ({"nodes": 0, "hours": 1, "checkpoint_write_s": 60, "node_mtbf_h": 10}, "nodes"),
    ({"nodes": 8, "hours": "nan", "checkpoint_write_s": 60, "node_mtbf_h": 10}, "hours"),
    ({"nodes": 8, "hours": 1, "node_mtbf_h": 10}, "checkpoint_write_s"),
    ({"nodes": 8, "hours": 1, "checkpoint_write_s": -5, "node_mtbf_h": 10}, "checkpoint_write_s"),
    ({"nodes": 8, "hours": 1, "checkpoint_write_s": 60, "node_mtbf_h": "inf"}, "node_mtbf_h"),
    # Nothing measured yet and none given.
    ({"nodes": 8, "hours": 1, "checkpoint_write_s": 60}, "node_mtbf_h"),
])
def test_a_bad_or_missing_parameter_answers_400_naming_it(viewer, query, field):
    response = viewer.get(PLAN, query)
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{field}:")


def test_a_fleet_failing_far_faster_than_a_checkpoint_loses_all_its_time(viewer):
    answer = viewer.get(PLAN, {"nodes": 1000, "hours": 1, "checkpoint_write_s": 3600, "node_mtbf_h": 0.001}).json()
    assert answer["lost_fraction"] == 1.0 and answer["daly_interval_s"] == answer["job_mtbf_h"] * 3600


def test_the_plan_needs_a_login(client):
    assert client.get(PLAN, {"nodes": 1, "hours": 1, "checkpoint_write_s": 1, "node_mtbf_h": 1}).status_code == 401


@pytest.mark.parametrize(("p", "df", "expected"), [
    # Published χ² tables (NIST/SEMATECH e-Handbook, 1.3.6.7.4).
    (0.975, 2, 7.378), (0.025, 2, 0.05064), (0.975, 10, 20.483), (0.025, 10, 3.247),
    (0.975, 20, 34.170), (0.025, 20, 9.591), (0.975, 100, 129.561), (0.025, 100, 74.222),
    # Beyond the exact series: Wilson–Hilferty (table values 1089.531 and 914.257 for 1,000).
    (0.975, 1002, 1091.62), (0.025, 1002, 916.17),
])
def test_chi_square_quantiles_match_the_tables(p, df, expected):
    assert chi2_quantile(p, df) == pytest.approx(expected, rel=2e-4)


def test_the_series_and_the_approximation_agree_where_they_meet():
    assert chi2_quantile(0.975, 1000) == pytest.approx(chi2_quantile(0.975, 1002) - 2.09, rel=1e-3)


def test_the_mtbf_interval_of_a_count():
    # 10 failures in 1,000 h: 2000/χ²(.975; 22) to 2000/χ²(.025; 20) = 2000/36.781 to 2000/9.591.
    low, high = mtbf_interval(1000, 10)
    assert low == pytest.approx(2000 / 36.781, rel=1e-4) and high == pytest.approx(2000 / 9.591, rel=1e-4)
    # No failure: only a lower bound, 2T/χ²(.975; 2) = T/3.689.
    assert mtbf_interval(1000, 0) == (pytest.approx(2000 / 7.3778, rel=1e-4), None)
