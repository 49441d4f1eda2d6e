"""The node page's process table shows each process's SM and memory utilization (issue 36, shared GPUs): two
processes time-sliced on one GPU told apart, "—" where the driver has no sample for a process. Real samples through
a real ingest to Chromium; the node is fed by a thread standing in for its collector."""

import pytest

from tests.feeder import feeding
from tests.samples import sample
from tests.test_browser_overview_behaviour import small_page, small_system  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

NODE = "shared-01"
GIB = 1024**3


def shared_sample() -> dict:
    s = sample(NODE, gpus=1)
    s["gpus"][0]["processes"] = [
        {"pid": 21, "user": "ana", "mem_used": 2 * GIB, "sm_util": 62, "mem_util": 31},
        {"pid": 22, "user": "bo", "mem_used": 1 * GIB, "sm_util": 27, "mem_util": 9},
        {"pid": 23, "user": "cy", "mem_used": GIB // 2, "sm_util": None, "mem_util": None},
    ]
    return s


@pytest.fixture(scope="module")
def fed(small_system):  # noqa: F811
    with feeding(small_system.redis_url, NODE, shared_sample):
        yield small_system


def test_each_process_shows_its_sm_and_memory_share(fed, small_page):  # noqa: F811
    small_page.goto(fed.url.rstrip("/") + f"/nodes/{NODE}/")
    small_page.wait_for_selector("#proc-table tbody tr:nth-child(3) td.proc-sm")
    headers = small_page.eval_on_selector_all("#proc-table thead th", "cells => cells.map(c => c.textContent)")
    rows = small_page.eval_on_selector_all("#proc-table tbody tr", """rows => rows.map(r => [
        r.cells[1].textContent, r.querySelector(".proc-sm").textContent, r.querySelector(".proc-mem").textContent])""")

    assert headers[-2:] == ["SM %", "Memory %"]
    assert rows == [["21", "62", "31"], ["22", "27", "9"], ["23", "—", "—"]]
