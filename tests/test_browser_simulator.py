"""In a browser, on the running system: the simulator page refuses a fault that cannot apply (issue 32)."""

import pytest

from collectors import simulated

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("node, gpu, fault, why", [
    ("sim-01", "9", "hot", "sim-01 has 8 GPUs (GPUs 0-7): there is no GPU 9"),
    # The running system's third node is an L40S (collectors/simulated.py MODELS, in turn): no NVLink.
    ("sim-03", "2", "nvlink_down", "nvlink_down cannot apply to sim-03 GPU 2: the NVIDIA L40S has no NVLink"),
])
def test_the_simulator_page_refuses_a_fault_that_cannot_apply_saying_why(admin_page, running_system, node, gpu,
                                                                         fault, why):
    assert simulated.MODELS[2].name == "NVIDIA L40S"
    page = admin_page
    page.goto(f"{running_system.base_url}/alerts/simulator/")
    page.fill("#id_node", node)
    page.fill("#id_gpu", gpu)
    page.fill("#id_fault", fault)
    with page.expect_navigation():
        page.click("#fault-form button[type=submit]")
    assert why in page.locator("#fault-form").inner_text()
    assert f"{node}/{gpu}" not in page.locator("#faults").inner_text()
    assert f"{fault} injected" not in page.locator("main").inner_text()
