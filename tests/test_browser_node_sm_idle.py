"""The node page marks a GPU ingest flags "kernels run, SMs idle" (gpulse/activity.py) with "SM IDLE" in its GPU
table, as it marks one with a firing alert. End to end: a node fed at utilization 100 with SM activity 0.05 for
over GPULSE_SM_IDLE_FOR; ingest's SmIdleStage writes keys.sm_idle, the node's websocket (NodeConsumer) sends its GPUs as
sm_idle_gpus, node.js marks them."""

import pytest

from tests.browser import logged_in_page
from tests.feeder import feeding
from tests.fixtures_system import ADMIN_PASSWORD, ADMIN_USER
from tests.samples import sample
from tests.test_browser_overview_behaviour import small_stack

pytestmark = pytest.mark.browser
# Shorter than the default minute: the stage's own tests time the condition; this one follows it to the page.
SM_IDLE_FOR = 10

NODE = "stalled-01"
IDLE_GPU = 1
MARKS = """() => Array.from(document.querySelectorAll("#gpu-table tbody tr"),
  tr => Array.from(tr.cells[0].querySelectorAll(".tag"), tag => tag.textContent))"""


def stalled_sample() -> dict:
    s = sample(NODE, gpus=2)
    s["gpus"][0].update(util=60, sm_active=0.5)
    s["gpus"][IDLE_GPU].update(util=100, sm_active=0.05)  # the stalled data loader
    return s


@pytest.fixture(scope="module")
def small_system(tmp_path_factory):
    with small_stack(tmp_path_factory, GPULSE_SM_IDLE_FOR=str(SM_IDLE_FOR)) as stack:
        yield stack


def test_a_stalled_gpu_is_marked_once_the_condition_held_for_its_time(small_system, chromium):
    base = small_system.url.rstrip("/")
    with feeding(small_system.redis_url, NODE, stalled_sample), \
            logged_in_page(chromium, base, ADMIN_USER, ADMIN_PASSWORD, next_path="/") as page:
        page.goto(base + f"/nodes/{NODE}/")
        page.wait_for_selector("#gpu-table tbody tr:nth-child(2)")
        assert page.evaluate(MARKS) == [[], []]
        page.wait_for_function(f"() => ({MARKS})()[{IDLE_GPU}].includes('SM IDLE')",
                               timeout=(SM_IDLE_FOR + 30) * 1000)

        assert page.evaluate(MARKS) == [[], ["SM IDLE"]]
