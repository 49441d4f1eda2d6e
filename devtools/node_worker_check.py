"""A benchmark through a real Celery node worker, as the dashboard's "Launch" button runs one.

    python -m devtools.node_worker_check [--pool solo|prefork] [--backend auto] [--min-bytes 8] [--max-bytes 64M]
                                         [--timeout 120] [--json FILE]

devtools.gpu_check calls workers.launcher.run_node itself; this goes the way
a launched job goes, where a CUDA-specific failure (CUDA set up in a process
that forks later, NCCL in a pool's child process) can only show:

1. its own redis-server on a free port, in a temporary folder;
2. ``celery -A workers.node_worker worker -Q node.<name>`` as the deployment
   starts it (docker-compose.yml: the solo pool; ``--pool prefork`` runs the
   task in a forked pool process instead);
3. the node's heartbeat, which the control side needs before a launch;
4. the task ``gpulse.benchmarks.run_node`` sent as dashboard/benchmarks/tasks.py
   sends it: one node, rank 0, the rendezvous on a free loopback port,
   ``auto`` resolving to nccl on a GPU node and gloo elsewhere;
5. the job's events stream read until the node's ``node_done``, or until the
   worker's log says the task raised or its pool process died (no
   ``node_done`` comes then: the control side would wait for the job's timeout).

It prints the versions, the backend and ranks the node resolved, the sweep
in nccl-tests' format and the outcome, and exits 0 only if the job succeeded
with no wrong value and every row streamed. It needs only the node's
packages (requirements-node.txt), not Django. With --json it writes
everything it read.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from collectors.arguments import positive_float, positive_int
from devtools.celery_process import spawn_worker, stop_workers
from devtools.redis_server import EmbeddedRedis, free_port, redis_server_binary
from gpulse import job_events
from gpulse.celery_contract import node_broker, node_queue, node_transport_options
from gpulse.heartbeat import workerless
from gpulse.job_status import JobStatus
from gpulse.keys import Keys
from gpulse.sweep_spec import BACKENDS, DTYPES, Row, SpecError, SweepSpec, format_size, parse_size
from workers.celery_app import app
from workers.report import table_lines, wrong_total

# The Redis is this check's own: no other job can hold this id.
JOB_ID = 1
POOLS = ("solo", "prefork", "threads")
WORKER_START_S = 60.0
# run_node returns within the job's timeout plus a few seconds of cleanup
# (workers/launcher.py); the task's own start (importing torch) comes on top.
REPORT_MARGIN_S = 60.0
# After node_done the task only returns (it sends the control host nothing).
WORKER_STOP_S = 10.0
LOG_TAIL_CHARS = 4000


class CheckFailed(Exception):
    """The check could not get as far as the job's outcome; the message says where it stopped."""


def start_worker(node: str, pool: str, redis_url: str, log: Path) -> subprocess.Popen:
    return spawn_worker(["workers.node_worker", "worker", "-Q", node_queue(node), "-n", f"{node}@%h",
                         "--pool", pool, "--concurrency", "1"], log, {"REDIS_URL": redis_url})


def wait_for_heartbeat(worker: subprocess.Popen, client: redis.Redis, keys: Keys, node: str) -> dict:
    """Wait for the worker's heartbeat, as a launch needs it (gpulse/heartbeat.py), and return its value."""
    deadline = time.monotonic() + WORKER_START_S
    while workerless(client, keys, [node]):
        if worker.poll() is not None:
            raise CheckFailed(f"the node worker exited with code {worker.returncode} before its first heartbeat")
        if time.monotonic() > deadline:
            raise CheckFailed(f"no heartbeat of node {node} within {WORKER_START_S:g} s of starting its worker")
        time.sleep(0.1)
    return json.loads(client.get(keys.worker(node)))


def send_run_node(redis_url: str, node: str, spec: SweepSpec) -> str:
    """Send the node's task with the arguments and queue dashboard/benchmarks/tasks.py gives it; return its id."""
    with app.connection_for_write(redis_url, transport_options=node_transport_options(node_broker(node))) as connection:
        return app.send_task("gpulse.benchmarks.run_node", args=[JOB_ID, node, spec.to_dict()],
                             queue=node_queue(node), connection=connection).id


def task_error(log: Path, task_id: str) -> str | None:
    """The worker's log line saying the task ended in an exception, after which no node_done comes.

    Celery logs "Task <name>[<id>] raised ..." for an exception in the task and
    "Task handler raised error: WorkerLostError(...)" for a pool process that died.
    """
    for line in log.read_text(errors="replace").splitlines():
        if f"[{task_id}] raised" in line or "Task handler raised error" in line:
            return line.strip()
    return None


def read_until_done(worker: subprocess.Popen, log: Path, task_id: str, client: redis.Redis, keys: Keys,
                    timeout: float, node: str) -> list[dict]:
    """Return the job's events up to and including the node's node_done."""
    events: list[dict] = []
    after: dict[str, str] = {}
    sent = time.monotonic()
    deadline = sent + timeout
    while not events or events[-1]["kind"] != "node_done":
        if worker.poll() is not None:
            raise CheckFailed(f"the node worker exited with code {worker.returncode} before the node reported")
        if error := task_error(log, task_id):
            raise CheckFailed(f"the task ended before the node reported: {error}")
        if time.monotonic() > deadline:
            seen = ", ".join(sorted({event["kind"] for event in events})) or "nothing"
            raise CheckFailed(f"no node_done on the job's events stream within {timeout:g} s (it had {seen})")
        # The node writes only to its own events stream of the job (gpulse/job_events.py).
        for entry in job_events.read(client, keys, JOB_ID, after, [node], block_ms=500):
            event = entry.event
            if event is None or entry.source != node:
                continue
            events.append(event)
            if event["kind"] == "started":
                print(f"the node's task started {time.monotonic() - sent:.1f} s after it was sent")
            if event["kind"] == "node_done":
                break
    return events


def stop_worker(worker: subprocess.Popen) -> None:
    """Stop the worker's main process first: its warm shutdown lets the task take its last steps after
    node_done (the acknowledgement), which a prefork child would not if the whole group
    got the signal at once. Whatever is still running after WORKER_STOP_S is stopped with its group."""
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            pass
    stop_workers([worker])


def outcome(events: list[dict]) -> dict:
    """What the node reported: status, backend and ranks, versions, rows and the report's lines."""
    done = events[-1]
    result = done["result"]
    # A task that failed before run_node returned reports its reason and no result (workers/node_tasks.py).
    spec = SweepSpec.from_dict(result["spec"]) if "spec" in result else None
    rows = [Row(**row) for row in result.get("rows", [])]
    streamed = [event["row"] for event in events if event["kind"] == "row"]
    return {
        "status": done["status"], "reason": done["reason"], "crashed": done["crashed"],
        "duration_s": round(result.get("duration_s", 0.0), 2), "backend": spec and spec.backend,
        "ranks_per_node": spec and spec.ranks_per_node, "versions": result["versions"],
        "rows": result.get("rows", []), "rows_streamed": streamed, "wrong": wrong_total(rows),
        # A job that failed before its first size has no resolved spec to head a report.
        "report": table_lines(spec, result["versions"], rows) if spec and rows else [],
    }


def passed(report: dict) -> bool:
    """Succeeded, every value right, and rank 0's rows streamed as the job page shows them."""
    return (report.get("status") == JobStatus.SUCCEEDED and report.get("wrong") == 0
            and report["rows_streamed"] == report["rows"])


def print_outcome(report: dict) -> None:
    versions = report["versions"]
    if versions:
        print("versions: " + ", ".join(f"{name} {versions[name] or '-'}"
                                       for name in ("torch", "nccl", "cuda", "driver", "python")))
    else:
        print("versions: none reported (the node failed before it collected them)")
    ranks = report["ranks_per_node"] or "not resolved"
    print(f"resolved: backend {report['backend']}, ranks on this node {ranks}")
    if report["report"]:
        print("\n".join(report["report"]))
    print(f"rows streamed on the events stream: {len(report['rows_streamed'])}, in node_done: {len(report['rows'])}")
    reason = f" ({report['reason']})" if report["reason"] else ""
    crashed = ", a rank crashed" if report["crashed"] else ""
    wrong = "N/A" if report["wrong"] is None else report["wrong"]
    print(f"status: {report['status']}{reason}{crashed}, #wrong {wrong}, {report['duration_s']} s")


def check(args: argparse.Namespace, spec: SweepSpec, folder: Path, report: dict) -> None:
    """Run the job through a node worker of its own, filling ``report`` as it goes."""
    log = folder / "node-worker.log"
    server = EmbeddedRedis(directory=str(folder / "redis")).start()
    assert server.process is not None  # start() started it
    report["redis_pid"] = server.process.pid
    report["redis_server"] = redis_server_binary()
    worker = None
    try:
        with redis.Redis.from_url(server.url, socket_timeout=10) as client:
            keys = Keys()
            worker = start_worker(args.node, args.pool, server.url, log)
            report["worker_pid"] = worker.pid
            started = time.monotonic()
            report["heartbeat"] = beat = wait_for_heartbeat(worker, client, keys, args.node)
            print(f"node worker of {args.node}: pool {args.pool}, pid {worker.pid}, heartbeat from "
                  f"{beat['hostname']} after {time.monotonic() - started:.1f} s")
            task_id = send_run_node(server.url, args.node, spec)
            print(f"job {JOB_ID}: run_node sent to {node_queue(args.node)}: backend {spec.backend}, {spec.dtype}, "
                  f"sizes {format_size(spec.min_bytes)} to {format_size(spec.max_bytes)} bytes")
            report["events"] = events = read_until_done(worker, log, task_id, client, keys,
                                                        spec.timeout + REPORT_MARGIN_S, args.node)
        report.update(outcome(events))
        print_outcome(report)
    finally:
        if worker is not None:
            stop_worker(worker)
            report["worker_log"] = log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        server.stop()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", default=socket.gethostname(),
                        help="the node's name, its queue node.<name> (default: this host's name, as deployed)")
    parser.add_argument("--pool", choices=POOLS, default="solo",
                        help="the worker's pool: solo as deployed; prefork runs the task in a forked child")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="auto = nccl where CUDA is available")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--ranks-per-node", type=positive_int, default=None,
                        help="default: the node's worker resolves it (one per GPU, or 1 without GPUs)")
    parser.add_argument("--min-bytes", type=parse_size, default="8", help="K, M, G suffixes, binary")
    parser.add_argument("--max-bytes", type=parse_size, default="64M")
    parser.add_argument("--iters", type=positive_int, default=SweepSpec.iters, help="timed iterations per size")
    parser.add_argument("--warmup", type=int, default=SweepSpec.warmup, help="untimed iterations before each")
    parser.add_argument("--timeout", type=positive_float, default=120.0,
                        help="seconds the job may take, as the launch form's timeout (300 there): a sweep to 64M "
                             "takes seconds, and a hung one should not hold a GPU node's scarce time")
    parser.add_argument("--json", help="write everything read (events, heartbeat, worker log) to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    try:
        # One node, rank 0; the rendezvous on loopback, on a free port chosen up
        # front, as dashboard/benchmarks/rendezvous.py chooses one for a loopback address.
        spec = SweepSpec(backend=args.backend, dtype=args.dtype, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                         warmup=args.warmup, iters=args.iters, nnodes=1, node_rank=0,
                         ranks_per_node=args.ranks_per_node, master_addr="127.0.0.1", master_port=free_port(),
                         timeout=args.timeout)
    except SpecError as exc:
        parser.error(str(exc))
    report: dict = {"node": args.node, "pool": args.pool, "job_id": JOB_ID, "spec": spec.to_dict()}
    try:
        with tempfile.TemporaryDirectory(prefix="gpulse-node-worker-check-") as folder:
            check(args, spec, Path(folder), report)
    except CheckFailed as exc:
        report["error"] = str(exc)
        print(f"\nFAILED: {exc}", file=sys.stderr)
    finally:
        # Written and shown whatever went wrong, an unexpected exception too.
        if args.json:
            with open(args.json, "w") as out:
                json.dump(report, out, indent=1, default=str)
        if not passed(report) and "worker_log" in report:
            print(f"\n## the node worker's log, its last {LOG_TAIL_CHARS} characters\n{report['worker_log']}",
                  file=sys.stderr)
    return 0 if passed(report) else 1


if __name__ == "__main__":
    sys.exit(main())
