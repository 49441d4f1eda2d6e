"""The collectives beside all_reduce (issue 38): each one's sizes, bus-bandwidth factor and #wrong check,
on real gloo ranks through the node launcher; the same job from the API, the form's field and the CLI."""

import json

import pytest

from gpulse.sweep_spec import OPS, Limits, SpecError, SweepSpec, op_sizes
from workers.launcher import run_node
from workers.report import table_lines

# nccl-tests' bus-bandwidth factors (src/<op>.cu, GetBw), at n ranks.
FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
RANKS = 3


def sweep(op: str, **fields) -> SweepSpec:
    return SweepSpec(**{"op": op, "backend": "gloo", "ranks_per_node": RANKS, "min_bytes": 1024,
                        "max_bytes": 16 * 1024, "factor": 4, "warmup": 1, "iters": 2, "timeout": 60.0, **fields})


def test_every_operation_of_nccl_tests_is_known_with_its_factor():
    assert set(OPS) == set(FACTORS)
    for op, factor in FACTORS.items():
        assert OPS[op].bus_factor(8) == pytest.approx(factor(8)), op


def test_a_split_message_gives_each_rank_a_part_rounded_to_16_bytes_as_nccl_tests():
    # all_gather_perf -b 1K -e 16K -f 4 on 3 ranks of float: 1024/4/3 = 85 elements, rounded down to 84.
    assert op_sizes("all_gather", 1024, 16 * 1024, 4, 4, 3) == [(1008, 84), (4080, 340), (16368, 1364)]
    assert op_sizes("broadcast", 1024, 16 * 1024, 4, 4, 3) == [(1024, 256), (4096, 1024), (16384, 4096)]
    # Too small for every rank to have a part: left out, and a sweep of nothing else is refused.
    assert op_sizes("alltoall", 16, 64, 2, 4, 3) == [(48, 4)]
    with pytest.raises(SpecError, match="leaves no rank a part of 16 bytes; use at least 48"):
        sweep("alltoall", min_bytes=16, max_bytes=32).sizes()


def test_an_unknown_operation_or_a_sendrecv_of_one_rank_is_refused_with_what_to_use():
    with pytest.raises(SpecError, match="unknown operation 'gather': use one of all_reduce, all_gather"):
        SweepSpec(op="gather")
    with pytest.raises(SpecError, match="sendrecv .* needs at least 2 ranks"):
        SweepSpec(op="sendrecv", ranks_per_node=1).sizes()
    # The node side takes every operation the form offers.
    assert SweepSpec.from_dict({"op": "reduce_scatter"}, Limits()).op == "reduce_scatter"


@pytest.mark.parametrize("op", list(OPS))
def test_each_operation_runs_on_gloo_ranks_with_its_factor_and_no_wrong_values(op):
    result = run_node(sweep(op))
    assert result.ok, result.reason
    expected_sizes = op_sizes(op, 1024, 16 * 1024, 4, 4, RANKS)
    placements = (False, True) if OPS[op].in_place else (False,)
    assert [(row.size, row.count, row.inplace) for row in result.rows] == [
        (size, count, inplace) for size, count in expected_sizes for inplace in placements]
    for row in result.rows:
        assert row.wrong == 0, row
        assert row.redop == OPS[op].redop
        assert row.algbw == pytest.approx(row.size / (row.time_us / 1e6) / 1e9)
        assert row.busbw == pytest.approx(row.algbw * FACTORS[op](RANKS))
    lines = table_lines(result.spec, result.versions, result.rows)
    assert f"# Collective test starting: {OPS[op].program}" in lines
    measured = [line.split() for line in lines if not line.startswith("#")]
    assert len(measured) == len(expected_sizes)
    assert all(fields[4] == str(OPS[op].root) for fields in measured)  # the root column
    if not OPS[op].in_place:
        assert all(fields[-4:] == ["N/A"] * 4 for fields in measured)


# A broadcast sends only its root's input: corrupting another rank's changes nothing it delivers.
@pytest.mark.parametrize("op, corrupt, wrong_per_row", [
    ("all_reduce", 1, RANKS),  # every rank receives the wrong sum
    ("all_gather", 1, RANKS),  # every rank receives rank 1's wrong part
    ("reduce_scatter", 1, 1),  # only rank 0's part holds element 0
    ("alltoall", 1, 1),  # rank 1's part for rank 0
    ("broadcast", 0, RANKS),
    ("reduce", 2, 1),  # only the root receives
    ("sendrecv", 1, 1),  # rank 2 receives from rank 1
])
def test_a_corrupted_input_shows_in_each_operations_wrong_count(op, corrupt, wrong_per_row):
    result = run_node(sweep(op, max_bytes=1024, corrupt_rank=corrupt))
    assert result.ok, result.reason
    assert [row.wrong for row in result.rows] == [wrong_per_row] * len(result.rows)


def test_corrupting_a_rank_other_than_the_root_leaves_a_broadcast_right():
    result = run_node(sweep("broadcast", max_bytes=1024, corrupt_rank=1))
    assert result.ok and {row.wrong for row in result.rows} == {0}


@pytest.mark.django_db(transaction=True)
class TestLaunched:
    """The operation through the API, the form and the CLI, on the node workers."""

    SMALL = {"backend": "gloo", "min_bytes": "1K", "max_bytes": "16K", "iters": 2, "warmup_iters": 1,
             "timeout_seconds": 60, "ranks_per_node": 1}

    def post(self, client, **fields):
        return client.post("/api/v1/benchmarks", json.dumps({**self.SMALL, **fields}),
                           content_type="application/json")

    def test_an_unknown_operation_gets_400_naming_the_field(self, client, operator_user, live_nodes):
        client.force_login(operator_user)
        response = self.post(client, nodes=live_nodes, op="gather")
        assert response.status_code == 400
        assert "op" in response.json()["fields"]

    def test_a_sendrecv_of_one_rank_gets_400_saying_why(self, client, operator_user, live_nodes):
        client.force_login(operator_user)
        response = self.post(client, nodes=live_nodes[:1], op="sendrecv")
        assert response.status_code == 400
        assert "needs at least 2 ranks" in json.dumps(response.json())

    def test_an_all_gather_job_runs_across_two_nodes_and_records_its_operation(
        self, client, operator_user, live_nodes, node_workers, control_worker
    ):
        from tests.test_benchmark_jobs import wait_for

        node_workers.start(*live_nodes)
        client.force_login(operator_user)
        response = self.post(client, nodes=live_nodes, op="all_gather")
        assert response.status_code == 202, response.content
        job = wait_for(response.json()["id"], {"succeeded", "failed", "timed_out"}, timeout=90)
        assert job.status == "succeeded", job.reason
        assert job.op == "all_gather" and job.result["world_size"] == 2
        rows = job.result["rows"]
        assert [(r["size"], r["count"]) for r in rows if not r["inplace"]] == op_sizes("all_gather", 1024, 16384, 2,
                                                                                       4, 2)
        assert all(r["wrong"] == 0 and r["busbw"] == pytest.approx(r["algbw"] / 2) for r in rows)  # (n−1)/n
        api = client.get(f"/api/v1/benchmarks/{job.pk}").json()
        assert api["op"] == "all_gather" and api["has_in_place"] is True
        page = client.get(f"/benchmarks/{job.pk}/").content.decode()
        assert "<h1>all_gather #" in page
        assert '<td class="op">all_gather</td>' in client.get("/benchmarks/").content.decode()

    def test_the_cli_runs_an_alltoall_across_nodes_and_prints_alltoall_perf_lines(
        self, live_nodes, node_workers, control_worker, capsys
    ):
        from django.core.management import call_command

        from dashboard.benchmarks.models import BenchmarkJob

        node_workers.start(*live_nodes)
        call_command("collective", "alltoall", "--nodes", ",".join(live_nodes), "--ranks-per-node", "1",
                     "--backend", "gloo", "--min-bytes", "1K", "--max-bytes", "4K", "--iters", "2", "--warmup", "1")
        out = capsys.readouterr().out
        assert "# Collective test concluded: alltoall_perf" in out
        lines = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
        assert [fields[:5] for fields in lines] == [["1024", "128", "float", "none", "-1"],
                                                    ["2048", "256", "float", "none", "-1"],
                                                    ["4096", "512", "float", "none", "-1"]]
        assert BenchmarkJob.objects.get().op == "alltoall"

    def test_run_again_keeps_the_operation(self, client, operator_user, live_nodes):
        from dashboard.benchmarks.models import BenchmarkJob

        job = BenchmarkJob.objects.create(op="reduce_scatter", nodes=live_nodes, ranks_per_node=1, min_bytes=1024,
                                          max_bytes=4096, status="succeeded")
        client.force_login(operator_user)
        form = client.get(f"/benchmarks/?again={job.pk}").content.decode()
        assert '<option value="reduce_scatter" selected>' in form
