import argparse
import json
import sys

from django.core.management.base import BaseCommand, CommandError

from gpulse.job_status import JobStatus
from gpulse.sweep_spec import BACKENDS, DTYPES, OPS, SpecError, SweepSpec, parse_size
from workers.launcher import collect_versions, resolve_spec, run_node
from workers.report import (
    LineByLine,
    footer_lines,
    header_lines,
    timestamp,
    to_json,
    to_nccl_tests_json,
    wrong_total,
)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


JSON_LAYOUTS = ("gpulse", "nccl-tests")


class Command(BaseCommand):
    help = ("Run a collective's bandwidth sweep (OP: " + ", ".join(OPS) + ") on this machine and print it like "
            "nccl-tests' binary of that name, e.g. all_gather_perf (sizes take K/M/G suffixes, binary).")
    # It touches neither the database nor the URLs; the checks would only
    # delay the benchmark, or stop it for a problem elsewhere in the project.
    requires_system_checks: list[str] = []
    # The operation every run of this command measures; None: the first argument names it.
    fixed_op: str | None = None

    def add_arguments(self, parser):
        if self.fixed_op is None:
            parser.add_argument("op", choices=list(OPS), metavar="OP", help="the collective: " + ", ".join(OPS))
        parser.add_argument("--nodes", type=lambda text: [n.strip() for n in text.split(",") if n.strip()],
                            help="comma-separated nodes: run across them through their node workers (Celery) "
                                 "and record the job; without it, run on this machine")
        parser.add_argument("--ranks-per-node", type=int, default=None,
                            help="ranks to run (default: one per GPU, or 1 without GPUs)")
        parser.add_argument("--backend", choices=list(BACKENDS), default="auto",
                            help="auto = nccl where CUDA is available, else gloo")
        parser.add_argument("--min-bytes", type=_size, default="1K")
        parser.add_argument("--max-bytes", type=_size, default="64M")
        parser.add_argument("--factor", type=int, default=2, help="size step factor")
        parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
        parser.add_argument("--warmup", type=int, default=5, help="untimed iterations before each timing")
        parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
        parser.add_argument("--no-check", action="store_true", help="skip the correctness check")
        parser.add_argument("--timeout", type=float, default=300.0, help="seconds before the whole job is stopped")
        parser.add_argument("--confirm-held", action="store_true",
                            help="with --nodes: launch even onto nodes whose GPUs a job holds (the benchmark shares"
                                 " them with that work); without it such a launch is refused, naming the holders")
        parser.add_argument("--corrupt-rank", type=int, default=None,
                            help="diagnostic: corrupt this rank's input to see the check report wrong values"
                                 " (a broadcast sends only its root's, rank 0)")
        parser.add_argument("--json", nargs="?", const="gpulse", choices=JSON_LAYOUTS, default=None,
                            help="print one JSON document instead of the table: gpulse's layout (the default), "
                                 "or 'nccl-tests' for the document nccl-tests' binaries write with -J")

    def handle(self, *args, **options):
        options["op"] = self.fixed_op or options["op"]
        if options["nodes"]:
            return self.run_on_nodes(options)
        try:
            spec = resolve_spec(SweepSpec(
                op=options["op"], backend=options["backend"], dtype=options["dtype"], min_bytes=options["min_bytes"],
                max_bytes=options["max_bytes"], factor=options["factor"], warmup=options["warmup"],
                iters=options["iters"], check=not options["no_check"], ranks_per_node=options["ranks_per_node"],
                timeout=options["timeout"], corrupt_rank=options["corrupt_rank"],
            ))
            spec.sizes()
        except SpecError as exc:
            raise CommandError(str(exc)) from None

        started = timestamp()
        as_json = options["json"]
        if not as_json:
            self._print(*header_lines(spec, collect_versions()))
        try:
            result = run_node(spec, on_row=None if as_json else self._line_printer(spec))
        except KeyboardInterrupt:
            raise CommandError("interrupted; every rank was stopped") from None
        if not result.ok:
            raise CommandError(f"{spec.op} {result.status}: {result.reason}")
        if as_json:
            self._print_json(as_json, result.spec, result.versions, result.rows, started)
        else:
            self._print(*footer_lines(spec, result.rows))
        self._fail_on_wrong(spec, result.rows)

    def run_on_nodes(self, options) -> None:
        """Launch a recorded job on the named nodes, then print its rows as rank 0 streams them."""
        from dashboard.benchmarks.cli_job import follow_job, launch_job

        job = launch_job(options)
        self.stderr.write(f"job {job.pk} on {', '.join(job.nodes)}: {job.ranks_per_node} rank(s) per node")
        spec = job.sweep_spec()
        started = timestamp()
        as_json = options["json"]
        if not as_json:
            self._print(*header_lines(spec, {}))
        job, rows = follow_job(job, (lambda row: None) if as_json else self._line_printer(spec))
        if job.status != JobStatus.SUCCEEDED:
            raise CommandError(f"job {job.pk} {job.status}: {job.reason}")
        if as_json == "nccl-tests":
            # {node: versions}: the first node's stand for the job, as nccl-tests reports rank 0's NCCL.
            first_node: dict = next(iter(job.result["versions"].values()), {})
            self._print_json(as_json, spec, first_node, rows, started)
        elif as_json:
            self._print_json(as_json, spec, job.result["versions"], rows, started)
        else:
            self._print(*footer_lines(spec, rows))
        self._fail_on_wrong(spec, rows)

    def _line_printer(self, spec: SweepSpec):
        lines = LineByLine(spec)

        def print_row(row):
            line = lines.add(row)
            if line is not None:
                self._print(line)

        return print_row

    @staticmethod
    def _fail_on_wrong(spec: SweepSpec, rows) -> None:
        if wrong_total(rows):
            raise CommandError(f"{wrong_total(rows)} wrong values: the {spec.op} returned wrong results")

    def _print_json(self, layout: str, spec, versions: dict, rows, started: str) -> None:
        if layout == "nccl-tests":
            document = to_nccl_tests_json(spec, versions, rows, args=list(sys.argv), start_time=started)
        else:
            document = to_json(spec, versions, rows)
        self._print(json.dumps(document))

    def _print(self, *lines: str) -> None:
        for line in lines:
            self.stdout.write(line)
        self.stdout.flush()
