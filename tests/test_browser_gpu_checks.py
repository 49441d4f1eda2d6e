"""In a browser: an operator checks a node's GPUs from the benchmarks page and reads what each node's worker
found as the run's page loads again until the run ends."""

import re

import pytest

from tests.browser import finished_gpu_check

pytestmark = pytest.mark.browser


def test_an_operator_checks_a_nodes_gpus_and_reads_the_result(admin_page, running_system):
    page = admin_page
    page.goto(f"{running_system.base_url}/benchmarks/")
    with page.expect_navigation():
        page.click("#gpu-checks")
    assert page.locator("#id_quick").is_checked()
    page.check("#node-picker input[value='sim-04']")
    page.check("#id_confirm_held")  # the simulated fleet's Slurm jobs hold GPUs of every node
    with page.expect_navigation():
        page.click("#gpu-check-form button[type=submit]")
    run = re.search(r"/benchmarks/gpu-checks/(\d+)/$", page.url).group(1)
    # A simulated node has no GPU: its worker runs the tests' CPU counterparts, measured and not judged.
    page.wait_for_function("() => document.getElementById('run-status').textContent === 'succeeded'",
                           timeout=90_000)
    node = page.locator("section.node-result[data-node='sim-04']")
    assert node.locator(".verdict").inner_text() == "healthy"
    rows = [row.split("\t") for row in node.locator("table.tests tbody tr").all_inner_texts()]
    assert [(row[0], row[1], row[3]) for row in rows] == [("CPU", "memory_bandwidth", "unknown"),
                                                          ("CPU", "matmul_fp32", "unknown")]
    assert re.fullmatch(r"\d+\.\d GB/s", rows[0][2]) and re.fullmatch(r"\d+\.\d GFLOPS", rows[1][2])
    assert page.locator("#run-active").count() == 0  # an ended run's page stays put

    page.goto(f"{running_system.base_url}/benchmarks/gpu-checks/")
    assert page.locator(f"#gpu-check-runs tr[data-run='{run}'] .status").inner_text() == "succeeded"


def test_a_nodes_failures_are_listed_with_each_test(admin_page, running_system):
    run = finished_gpu_check(running_system.stack)
    admin_page.goto(f"{running_system.base_url}/benchmarks/gpu-checks/{run}/")
    sick = admin_page.locator("section.node-result[data-node='sim-02']")
    assert sick.locator(".verdict").inner_text() == "unhealthy"
    assert sick.locator(".problems li").all_inner_texts() == [
        "GPU 0 pcie_link fail: x8 of x16 lanes, Gen5 of Gen5",
        "GPU 0 matmul_bf16 fail: 301.5 TFLOPS, 30 % of the H100 SXM's 989.4 TFLOPS dense bf16 peak, below its 50 %"
        " floor"]
    unchecked = admin_page.locator("section.node-result[data-node='sim-03']")
    assert unchecked.locator(".verdict").inner_text() == "could not check"
    assert "cannot load libnvidia-ml.so.1" in unchecked.locator(".reason").inner_text()
