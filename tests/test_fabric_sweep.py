"""Fabric sweeps (issue 38): the round-robin pairs, the flags, and a sweep of 8 nodes on real node workers
and gloo ranks where one node is slowed on purpose: it, and only it, is flagged."""

import itertools
import json
import time

import pytest

from dashboard.benchmarks import bisect
from dashboard.benchmarks.diagnostics import diagnose
from dashboard.benchmarks.fabric import judge, round_robin
from dashboard.benchmarks.models import FabricSweep
from tests.benchmark_nodes import report_nodes
from workers.collective import TEST_DELAY_ENV


@pytest.mark.parametrize("count", range(2, 10))
def test_round_robin_meets_every_pair_once_each_node_once_a_round(count):
    nodes = [f"n{i}" for i in range(count)]
    rounds = round_robin(nodes)
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    for pairs in rounds:
        busy = [node for pair in pairs for node in pair]
        assert len(busy) == len(set(busy)), pairs
    met = sorted(tuple(sorted(pair)) for pairs in rounds for pair in pairs)
    assert met == sorted(itertools.combinations(sorted(nodes), 2))


def test_a_slow_node_is_flagged_with_its_links_and_a_bad_cable_as_a_link_only():
    nodes = ["a", "b", "c", "d", "e"]
    links = {pair: 10.0 for pair in itertools.combinations(nodes, 2)}
    slow_node = {pair: (2.0 if "c" in pair else value) for pair, value in links.items()}
    verdict = judge(slow_node, 0.7)
    assert verdict.median == 10.0 and verdict.slow_nodes == ["c"]
    assert verdict.slow_links == [pair for pair in sorted(links) if "c" in pair]
    bad_cable = {**links, ("a", "b"): 3.0}
    verdict = judge(bad_cable, 0.7)
    assert verdict.slow_nodes == [] and verdict.slow_links == [("a", "b")]
    assert judge({}, 0.7).median is None


def bisect_until_done(nodes: list[str], speed) -> tuple[list[list[list[str]]], dict]:
    """Run a bisection on ``speed(node set) -> busbw``; return its rounds and its final state."""
    groups, state = bisect.start(nodes)
    rounds = []
    while groups is not None:
        rounds.append(groups)
        groups, state = bisect.next_round(state, groups, [speed(group) for group in groups], 0.7)
    return rounds, state


def test_bisection_names_the_slow_node_of_eight_in_six_jobs():
    nodes = [f"n{i}" for i in range(1, 9)]
    rounds, state = bisect_until_done(nodes, lambda group: 1.0 if "n6" in group else 10.0)
    assert rounds == [[nodes[:4], nodes[4:]], [["n5", "n6"], ["n7", "n8"]], [["n5", "n1"], ["n6", "n2"]]]
    assert state["suspects"] == ["n6"] and "n6 is below 70 %" in state["conclusion"]


def test_bisection_of_a_healthy_set_or_of_failures_ends_saying_so():
    nodes = [f"n{i}" for i in range(1, 8)]
    rounds, state = bisect_until_done(nodes, lambda group: 10.0)
    assert len(rounds) == 1 and state["suspects"] == [] and "not in one node" in state["conclusion"]
    # A node whose jobs fail is the suspect; with 7 nodes the halves are 3 and 4.
    rounds, state = bisect_until_done(nodes, lambda group: None if "n7" in group else 10.0)
    assert state["suspects"] == ["n7"]
    assert all(len(job) == 2 for job in rounds[-1])  # the last round pairs candidates with good nodes
    assert sum(len(jobs) for jobs in rounds) <= 2 * 3 + 3


@pytest.mark.django_db(transaction=True)
class TestSweep:
    SMALL = {"backend": "gloo", "size_bytes": "256K", "iters": 5, "warmup_iters": 1, "timeout_seconds": 60}

    def post(self, client, **fields):
        return client.post("/api/v1/fabric-sweeps", json.dumps({**self.SMALL, **fields}),
                           content_type="application/json")

    def test_one_node_or_a_message_past_the_cap_gets_400_naming_the_field(self, client, operator_user, live_nodes):
        client.force_login(operator_user)
        response = self.post(client, nodes=live_nodes[:1])
        assert response.status_code == 400 and "choose at least 2" in response.json()["fields"]["nodes"][0]
        response = self.post(client, nodes=live_nodes, size_bytes="1000G")
        assert response.status_code == 400 and "size_bytes" in response.json()["fields"]
        assert FabricSweep.objects.count() == 0

    def run_with_a_slow_node(self, client, operator_user, redis_client, settings, node_workers, slow: str,
                             flag_fraction: float = 0.1, delay_ms: int = 400, **fields) -> FabricSweep:
        """A sweep over 8 node workers of which ``slow`` waits ``delay_ms`` an iteration, run to its end."""
        settings.GPULSE_RENDEZVOUS_ADDR = "127.0.0.1"
        nodes = report_nodes(redis_client, [f"fab-{i}" for i in range(1, 9)])
        node_workers.start(*[node for node in nodes if node != slow])
        # The slowed node waits 400 ms an iteration: a 256 KiB job with it takes 10 to 1,000 times as long.
        node_workers.start(slow, env={TEST_DELAY_ENV: str(delay_ms)})
        client.force_login(operator_user)
        response = self.post(client, nodes=nodes, flag_fraction=flag_fraction, **fields)
        assert response.status_code == 202, response.content
        deadline = time.time() + 400
        while (sweep := FabricSweep.objects.get(pk=response.json()["id"])).status == "running":
            assert time.time() < deadline, f"sweep still in round {sweep.round + 1} of {len(sweep.rounds)}"
            time.sleep(1)
        assert sweep.status == "succeeded", sweep.reason
        return sweep

    def test_a_slowed_node_of_eight_is_flagged_and_no_other(
        self, client, operator_user, redis_client, settings, node_workers, control_worker
    ):
        slow = "fab-5"
        # 4 pairs at a time on 2 cores spread the healthy links' busbw over 30× (0.03 to 0.9 GB/s, measured):
        # links are flagged below 10 % of the median here.
        sweep = self.run_with_a_slow_node(client, operator_user, redis_client, settings, node_workers, slow)
        nodes = sweep.nodes
        sweep_id = sweep.pk
        assert len(sweep.rounds) == 7 and sweep.jobs.filter(status="succeeded").count() == 28
        assert sweep.result["failed"] == []
        assert sweep.result["slow_nodes"] == [slow], json.dumps(sweep.result["links"])
        # Every link of the slowed node is flagged. A healthy one may be too: on 2 busy cores a pair can
        # dip below 10 % of the median now and then, which the node's own median rides out.
        flagged = {frozenset(pair) for pair in sweep.result["slow_links"]}
        assert {frozenset((slow, other)) for other in nodes if other != slow} <= flagged
        api = client.get(f"/api/v1/fabric-sweeps/{sweep_id}").json()
        assert api["result"]["slow_nodes"] == [slow] and len(api["jobs"]) == 28
        # What node health takes from it (tests/test_fabric_diagnostics.py): the slowed node fails, no other.
        diagnosed = diagnose(sweep_id, sweep.kind, sweep.result, sweep.flag_fraction)
        assert sorted(diagnosed) == sorted(nodes)
        assert [node for node, findings in diagnosed.items() if ("fabric", None, "fail") in findings] == [slow]
        page = client.get(f"/benchmarks/fabric/{sweep_id}/").content.decode()
        assert f'<th scope="row" class="slow">⚠ {slow}</th>' in page
        assert page.count('class="num band-slow"') >= 2 * 7  # its row and its column

    def test_a_bisection_names_the_slowed_node_in_six_jobs(
        self, client, operator_user, redis_client, settings, node_workers, control_worker
    ):
        # A half is slower, and a node a suspect, below half of the other: the slowed node's jobs are far slower.
        # 1.2 s an iteration, not 400 ms: in a whole PostgreSQL pass the bisection once named no suspect (its
        # conclusion was not kept; the assertion now shows the result). Likeliest: with both halves' four ranks on
        # two busy cores, a healthy half's iterations took over half of the slowed half's.
        sweep = self.run_with_a_slow_node(client, operator_user, redis_client, settings, node_workers, "fab-6",
                                          flag_fraction=0.5, delay_ms=1200, kind="bisect")
        assert sweep.result["suspects"] == ["fab-6"] and sweep.result["slow_nodes"] == ["fab-6"], sweep.result
        assert sweep.jobs.count() == 6 and {job.op for job in sweep.jobs.all()} == {"all_reduce"}
        page = client.get(f"/benchmarks/fabric/{sweep.pk}/").content.decode()
        assert '<dd id="slow-nodes">fab-6</dd>' in page

    def test_a_bisection_of_fewer_than_4_nodes_gets_400(self, client, operator_user, live_nodes):
        client.force_login(operator_user)
        response = self.post(client, nodes=live_nodes, kind="bisect")
        assert response.status_code == 400 and "at least 4" in response.json()["fields"]["nodes"][0]
