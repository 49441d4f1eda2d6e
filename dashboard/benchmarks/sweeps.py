"""Fabric sweeps: launch one, run its rounds of jobs one after another, and judge what they measured.

A sweep's jobs are ordinary jobs (one rank per node, one message size),
launched through launch() like any other, so they run on the node workers
through the existing queues and show in the job list: two-node sendrecv jobs
for every pair (FabricSweep.PAIRS, judged by dashboard/benchmarks/fabric.py),
or all-reduce jobs over halves of halves (FabricSweep.BISECT,
dashboard/benchmarks/bisect.py). The reaper (dashboard/benchmarks/reaper.py)
calls advance() every pass: once no job of the current round is queued or
running, the next round's jobs go out, or the sweep ends. Moving to the next
round is a compare-and-set on ``FabricSweep.round``, so the reapers of
several control workers never launch a round twice.
"""

import logging

from django import forms
from django.utils import timezone

from dashboard.benchmarks import bisect
from dashboard.benchmarks.fabric import pairs_result, round_robin
from dashboard.benchmarks.launch import MAX_TIMEOUT, NodesForm, Refusal, SizeField, cancel, launch
from dashboard.benchmarks.models import BenchmarkJob, FabricSweep
from gpulse.job_status import ACTIVE, JobStatus
from gpulse.sweep_spec import BACKENDS, DTYPES, MAX_ITERS, MAX_WARMUP, MIN_TIMEOUT_S, Limits, SpecError, SweepSpec

log = logging.getLogger(__name__)

# A pair sends to the other and receives from it at once: both directions of the link. A bisection's
# halves run the collective whose slowness it looks into.
OPS = {FabricSweep.PAIRS: "sendrecv", FabricSweep.BISECT: "all_reduce"}
# The earlier sweeps looked through for one over the same nodes.
PREVIOUS_LOOKBACK = 50


class FabricSweepForm(NodesForm):
    field_order = ["kind", "nodes"]
    kind = forms.ChoiceField(choices=FabricSweep.KINDS, initial=FabricSweep.PAIRS, label="Sweep",
                             help_text="every pair: N−1 rounds of two-node sendrecv jobs, a matrix;"
                                       " bisection: all-reduces over halves of the slower half, O(log N) jobs")
    backend = forms.ChoiceField(choices=[(b, b) for b in BACKENDS], initial="auto")
    dtype = forms.ChoiceField(choices=[(d, d) for d in DTYPES], initial="float32")
    size_bytes = SizeField(initial="64M", label="Message size",
                           help_text="each pair's sendrecv message: large enough to fill the link")
    warmup_iters = forms.IntegerField(min_value=0, max_value=MAX_WARMUP, initial=5)
    iters = forms.IntegerField(min_value=1, max_value=MAX_ITERS, initial=20)
    timeout_seconds = forms.IntegerField(min_value=MIN_TIMEOUT_S, max_value=MAX_TIMEOUT, initial=120,
                                         help_text="each pair job's limit")
    flag_fraction = forms.FloatField(min_value=0.05, max_value=1.0, initial=0.7, label="Flag below",
                                     help_text="a link, or a node's median link, below this fraction of the median"
                                               " of all links is flagged")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["nodes"].help_text = "every pair of them is measured, each node in one pair at a time"

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if len(data["nodes"]) < 2:
            self.add_error("nodes", "a fabric sweep measures pairs of nodes: choose at least 2")
            return data
        if data["kind"] == FabricSweep.BISECT and len(data["nodes"]) < bisect.MIN_NODES:
            self.add_error("nodes", f"a bisection splits the nodes in halves of at least 2: choose at least"
                                    f" {bisect.MIN_NODES} (or sweep every pair)")
            return data
        try:
            pair_spec(data).check_bounds(Limits())
        except SpecError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


def pair_spec(data: dict) -> SweepSpec:
    """The spec of a two-node job of the sweep, for validating its values before any job exists."""
    spec = SweepSpec(op=OPS[data["kind"]], backend=data["backend"], dtype=data["dtype"], min_bytes=data["size_bytes"],
                     max_bytes=data["size_bytes"], warmup=data["warmup_iters"], iters=data["iters"], nnodes=2,
                     ranks_per_node=1, master_port=1, timeout=float(data["timeout_seconds"]))
    spec.sizes()
    return spec


def launch_sweep(user, data: dict) -> FabricSweep:
    """Create the sweep over ``data["nodes"]`` (FabricSweepForm's cleaned data) and start its first round."""
    fields = {name: data[name] for name in ("kind", "nodes", "backend", "dtype", "size_bytes", "warmup_iters",
                                            "iters", "timeout_seconds", "flag_fraction")}
    if data["kind"] == FabricSweep.BISECT:
        first, state = bisect.start(data["nodes"])
        sweep = FabricSweep.objects.create(created_by=user, started=timezone.now(), rounds=[first], result=state,
                                           **fields)
    else:
        sweep = FabricSweep.objects.create(created_by=user, started=timezone.now(),
                                           rounds=round_robin(data["nodes"]), **fields)
    advance(sweep)
    return sweep


def advance(sweep: FabricSweep) -> None:
    """Start the next round once the current one has ended, or judge the sweep after its last."""
    if sweep.jobs.filter(sweep_round=sweep.round, status__in=ACTIVE).exists():
        return
    following = sweep.round + 1
    # The compare-and-set: of several reapers, one moves the sweep on.
    if not FabricSweep.objects.filter(pk=sweep.pk, round=sweep.round, status=JobStatus.RUNNING).update(
            round=following):
        return
    sweep.round = following
    if sweep.kind == FabricSweep.BISECT and following > 0:
        ended = sweep.rounds[following - 1]
        groups, state = bisect.next_round(sweep.result, ended, _busbw_of_round(sweep, following - 1, ended),
                                          sweep.flag_fraction)
        if groups is None:
            _end(sweep, JobStatus.SUCCEEDED, "", {**state, "slow_nodes": state["suspects"]})
            return
        sweep.rounds = [*sweep.rounds, groups]
        FabricSweep.objects.filter(pk=sweep.pk).update(rounds=sweep.rounds, result=state)
    if following < len(sweep.rounds):
        for nodes in sweep.rounds[following]:
            _launch(sweep, nodes)
    else:
        _judge(sweep)


def _busbw_of_round(sweep: FabricSweep, round_index: int, groups: list[list[str]]) -> list[float | None]:
    """Each node set's busbw (out-of-place at the sweep's size) in that round; None where its job failed."""
    measured = {tuple(job.nodes): job.busbw_largest for job in sweep.jobs.filter(sweep_round=round_index)
                if job.status == JobStatus.SUCCEEDED}
    return [(measured.get(tuple(nodes)) or {}).get("out_of_place") for nodes in groups]


def _launch(sweep: FabricSweep, nodes: list[str]) -> None:
    data = {"op": OPS[sweep.kind], "nodes": nodes, "ranks_per_node": 1, "backend": sweep.backend, "dtype": sweep.dtype,
            "min_bytes": sweep.size_bytes, "max_bytes": sweep.size_bytes, "warmup_iters": sweep.warmup_iters,
            "iters": sweep.iters, "timeout_seconds": sweep.timeout_seconds, "sweep": sweep,
            "sweep_round": sweep.round}
    outcome = launch(sweep.created_by, data, rate_limited=False)
    if isinstance(outcome, Refusal):
        # A pair that cannot run now (its node busy, or without a worker) is recorded as a failed job, so
        # the sweep goes on and its matrix says why that pair has no figure.
        BenchmarkJob.objects.create(created_by=sweep.created_by, status=JobStatus.FAILED, reason=outcome.message,
                                    finished=timezone.now(), **data)


def links_of(sweep: FabricSweep) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """Each measured pair's busbw (GB/s, out-of-place at the sweep's size), and each failed pair's reason."""
    measured, failed = {}, {}
    for job in sweep.jobs.all():
        pair = (job.nodes[0], job.nodes[1])
        largest = job.busbw_largest
        if job.status == JobStatus.SUCCEEDED and largest and largest["out_of_place"] is not None:
            measured[pair] = largest["out_of_place"]
        else:
            failed[pair] = job.reason or job.status
    return measured, failed


def _judge(sweep: FabricSweep) -> None:
    measured, failed = links_of(sweep)
    result = pairs_result(measured, failed, sweep.flag_fraction)
    _end(sweep, JobStatus.SUCCEEDED if measured else JobStatus.FAILED,
         "" if measured else "no pair could be measured", result)


def _end(sweep: FabricSweep, status: str, reason: str, result: dict) -> None:
    FabricSweep.objects.filter(pk=sweep.pk, status=JobStatus.RUNNING).update(
        status=status, reason=reason, result=result, finished=timezone.now())
    log.info("fabric sweep %s (%s) %s: slow nodes %s", sweep.pk, sweep.kind, status, result.get("slow_nodes"))


def cancel_sweep(sweep: FabricSweep, by: str) -> bool:
    """Cancel a running sweep and every job of it not yet ended; return False if it had already ended.

    The sweep is marked first: advance() moves only a running sweep on, so no round starts after this."""
    if not FabricSweep.objects.filter(pk=sweep.pk, status=JobStatus.RUNNING).update(
            status=JobStatus.CANCELLED, reason=f"cancelled by {by}", finished=timezone.now()):
        return False
    for job in sweep.jobs.filter(status__in=ACTIVE):
        cancel(job)
    log.info("fabric sweep %s cancelled by %s", sweep.pk, by)
    return True


def previous_of(sweep: FabricSweep) -> FabricSweep | None:
    """The last finished sweep over the same nodes before this one, to compare with."""
    earlier = FabricSweep.objects.filter(status=JobStatus.SUCCEEDED, kind=sweep.kind,
                                         created__lt=sweep.created).order_by("-created")
    return next((other for other in earlier[:PREVIOUS_LOOKBACK] if sorted(other.nodes) == sorted(sweep.nodes)), None)


# The matrix's colour bands: a link's busbw as a share of the median, from the top band down.
BANDS = ((0.9, "band-ok"), (0.7, "band-fair"), (0.5, "band-low"), (0.0, "band-slow"))


def matrix_rows(sweep: FabricSweep) -> list[dict]:
    """The node × node table of the sweep's page: per node its cells (busbw, band, failed reason), in node order."""
    result = sweep.result or {}
    measured = {(link["a"], link["b"]): link["busbw"] for link in result.get("links", [])}
    failed = {(link["a"], link["b"]): link["reason"] for link in result.get("failed", [])}
    median = result.get("median")
    slow_nodes = set(result.get("slow_nodes", []))
    rows = []
    for a in sweep.nodes:
        cells = []
        for b in sweep.nodes:
            value = measured.get((a, b), measured.get((b, a)))
            reason = failed.get((a, b), failed.get((b, a)))
            band = ""
            if value is not None and median:
                band = next(name for floor, name in BANDS if value >= floor * median)
            cells.append({"node": b, "self": a == b, "busbw": value, "band": band, "failed": reason})
        rows.append({"node": a, "slow": a in slow_nodes, "median": result.get("node_medians", {}).get(a),
                     "cells": cells})
    return rows


def link_table(sweep: FabricSweep, previous: FabricSweep | None) -> list[dict]:
    """Every measured link, slowest first, with its share of the median and the previous sweep's figure."""
    result = sweep.result or {}
    median = result.get("median")
    slow = {tuple(pair) for pair in result.get("slow_links", [])}
    before = {}
    if previous is not None:
        before = {frozenset((link["a"], link["b"])): link["busbw"] for link in previous.result.get("links", [])}
    links = sorted(result.get("links", []), key=lambda link: link["busbw"])
    return [{**link, "share": link["busbw"] / median if median else None, "slow": (link["a"], link["b"]) in slow,
             "previous": before.get(frozenset((link["a"], link["b"])))} for link in links]
