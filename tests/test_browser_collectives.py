"""In a browser: choose an operation in the launch form, watch an alltoall run on two simulated nodes (it has no
in-place form: its progress still ends), then compare it with an all_gather, each labelled by its operation."""

import re

import pytest

from tests.browser import launch_finished_job

pytestmark = pytest.mark.browser


def test_an_operator_runs_an_alltoall_and_compares_it_with_an_all_gather(admin_page, running_system):
    page, base = admin_page, running_system.base_url
    nodes = ["sim-02", "sim-03"]
    first = re.search(r"\d+", launch_finished_job(page, base, "alltoall", nodes, max_bytes="64K")).group(0)
    assert page.locator("h1").inner_text().startswith(f"alltoall #{first}")
    assert page.locator("#job-status").text_content().strip() == "succeeded", page.locator("#job-reason").text_content()
    assert page.locator("#job-op").inner_text() == "alltoall"
    rows = page.locator("#rows tbody tr")
    assert rows.count() == 7  # 1K .. 64K by 2
    cells = rows.first.locator("td").all_inner_texts()
    assert cells[:4] == ["1024", "128", "float", "none"]  # a rank's part of the message, as alltoall_perf
    assert cells[8:] == ["", "", "", ""]  # no in-place form
    # busbw and algbw out-of-place only: no empty in-place traces in the legend.
    assert page.locator("#bandwidth-chart .scatterlayer .trace").count() == 2
    assert page.locator("#job-busbw-inplace").inner_text() == "–"

    second = re.search(r"\d+", launch_finished_job(page, base, "all_gather", nodes, max_bytes="64K")).group(0)
    assert page.locator("#job-status").text_content().strip() == "succeeded", page.locator("#job-reason").text_content()

    page.goto(f"{base}/benchmarks/")
    for job, op in ((first, "alltoall"), (second, "all_gather")):
        assert page.locator(f'#jobs tr[data-job="{job}"] .op').inner_text() == op
    page.goto(f"{base}/benchmarks/compare/?id={first}&id={second}")
    page.wait_for_selector("#compare-chart .scatterlayer .trace")
    assert page.locator("#compare-jobs .op").all_inner_texts() == ["alltoall", "all_gather"]
    legend = page.locator("#compare-chart .legendtext").all_text_contents()
    assert [text.split()[1] for text in legend] == ["alltoall", "all_gather"]
