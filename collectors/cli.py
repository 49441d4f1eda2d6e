"""`python -m collectors`: sample a source at a fixed cadence and publish the samples."""

import argparse
import gc
import logging
import math
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from collectors.arguments import folder, group_name, non_negative_float, positive_float, positive_int
from collectors.gpu_test_record import GpuTestRecord
from collectors.health_checks import HealthChecks
from collectors.probe import ProbeRunner
from collectors.publisher import DEFAULT_BUFFER_SIZE, RedisPublisher, StdoutPublisher
from collectors.simulated import SimulatedFleet, redis_fault_reader
from collectors.sources import Identity, Source, SourceUnavailable
from gpulse.faults import SPELLINGS, parse_fault, parse_target
from gpulse.keys import DEFAULT_REDIS_URL, Keys
from gpulse.node_redis import node_redis_client
from gpulse.ratelog import RateLimitedLog
from gpulse.redis_url import (
    REDIS_URL_FILE_ENV,
    RedisUrlError,
    has_password,
    read_redis_url_file,
    redis_url_from_environment,
)

log = logging.getLogger("gpulse.collector")

SOURCE_RETRY_MAX = 60.0  # s between attempts to open a source that is unavailable
# Where the kubelet serves its pod-resources API (collectors/pod_resources.py).
KUBELET_POD_RESOURCES = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collectors",
        description="Read GPU telemetry and stream version-1 samples into Redis.",
    )
    parser.add_argument("--source", choices=("nvml", "simulated", "dcgm"), default="nvml",
                        help="nvml: this machine's GPUs; simulated: a synthetic fleet; "
                             "dcgm: an existing dcgm-exporter endpoint (default: nvml)")
    parser.add_argument("--dcgm-url", default="http://127.0.0.1:9400/metrics",
                        help="dcgm-exporter endpoint for --source dcgm (default: %(default)s)")
    # As node_exporter's --path.sysfs and --path.procfs: a collector in a container reads the host's.
    parser.add_argument("--sysfs", type=folder, default=Path("/sys"),
                        help="where sysfs is mounted, for the InfiniBand/RoCE ports of --source nvml "
                             "(default %(default)s)")
    parser.add_argument("--procfs", type=folder, default=Path("/proc"),
                        help="where procfs is mounted, for the host's CPU and memory and the owner, command, "
                             "container and job of GPU processes with --source nvml (default %(default)s)")
    parser.add_argument("--kubelet-pod-resources", type=Path, default=KUBELET_POD_RESOURCES, metavar="SOCKET",
                        help="the kubelet's pod-resources socket, which --source nvml asks in the background which "
                             "pod holds each GPU; no socket there: GPUs are not attributed to pods "
                             "(default %(default)s)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--redis-url-file", metavar="PATH",
                       help="read the Redis URL to write to from this file, e.g. a systemd LoadCredential= file "
                            "($CREDENTIALS_DIRECTORY/redis-url) or a Kubernetes secret volume (default: the file "
                            f"named by ${REDIS_URL_FILE_ENV}, else $REDIS_URL, else {DEFAULT_REDIS_URL})")
    where.add_argument("--redis-url",
                       help="Redis to write to; deprecated with a password in it: every user of the node can "
                            "read a command line in /proc/<pid>/cmdline (use --redis-url-file or $REDIS_URL)")
    parser.add_argument("--interval", type=positive_float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--node-name",
                        help="node name (default: the hostname for nvml; the exporter's Hostname label for dcgm)")
    parser.add_argument("--nodes", type=positive_int, default=4, help="simulated nodes (default 4)")
    parser.add_argument("--gpus-per-node", type=positive_int, default=8, help="simulated GPUs per node (default 8)")
    parser.add_argument("--seed", type=int, help="random seed of the simulated fleet, for repeatable runs")
    parser.add_argument("--name-prefix", default="sim-",
                        help="simulated node names are PREFIX01, PREFIX02, ...; give each of several simulated "
                             "collectors its own prefix so their nodes stay apart (default %(default)s)")
    parser.add_argument("--only-node", action="append", default=[], metavar="NAME",
                        help="send this node of the simulated fleet only (repeatable): a node run as a collector of "
                             "its own, with its own credential, as the demo runs its first node")
    parser.add_argument("--except-node", action="append", default=[], metavar="NAME",
                        help="send every node of the simulated fleet but this one (repeatable)")
    parser.add_argument("--mig-node", metavar="NAME",
                        help="the simulated node whose GPUs (H100s) run MIG instances with jobs on them, e.g. "
                             "sim-04 (default: none)")
    parser.add_argument("--faults-url-file", metavar="PATH",
                        help="read the simulator's faults with the Redis URL in this file, for a simulated "
                             "collector whose own user reads nothing (default: its own Redis URL)")
    parser.add_argument("--fault", action="append", default=[], metavar="NODE[/GPU]=FAULT",
                        help=f"inject a fault into the simulated fleet: {SPELLINGS} (repeatable)")
    parser.add_argument("--expected-gpus", type=positive_int,
                        help="GPUs each node should have: fewer fails the gpu_count health check "
                             "(default: the count first seen)")
    parser.add_argument("--gpu-test-record", type=Path, metavar="PATH",
                        help="the file `python -m workers.healthcheck --record PATH` writes on this node: its "
                             "failed GPU tests are reported (health check gpu_tests) until a later run passes")
    parser.add_argument("--group", type=group_name,
                        help="the node's group for --source nvml, e.g. its Slurm partition or node pool: the "
                             "version_skew health check compares driver, CUDA and GPU model within it "
                             "(default: the whole cluster)")
    parser.add_argument("--energy-interval", type=non_negative_float,
                        help="seconds between reads of each GPU's energy counter for --source nvml: the call "
                             "costs milliseconds of CPU on recent GPUs; samples in between carry the last value "
                             "(default 10; 0: every sample)")
    parser.add_argument("--buffer-size", type=positive_int, default=DEFAULT_BUFFER_SIZE,
                        help="samples kept while Redis is unreachable (default %(default)s)")
    parser.add_argument("--probe-interval", type=float, default=600.0,
                        help="seconds between NCCL bandwidth probes of each node (default 600; 0 disables)")
    parser.add_argument("--probe-max-bytes", type=positive_int, default=16 << 20,
                        help="largest all-reduce message of a probe, in bytes (default 16 MiB)")
    parser.add_argument("--once", action="store_true", help="take one sample per node, publish it and exit")
    parser.add_argument("--stdout", action="store_true", help="print JSON lines instead of writing to Redis")
    return parser


def _parse_faults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, int | None, str]]:
    for flag in ("fault", "only_node", "except_node", "faults_url_file", "mig_node"):
        if getattr(args, flag) and args.source != "simulated":
            parser.error(f"--{flag.replace('_', '-')} applies to --source simulated only")
    faults = []
    for spec in args.fault:
        target, sep, fault = spec.partition("=")
        try:
            if not sep:
                raise ValueError("expected NODE[/GPU]=FAULT, e.g. sim-01/3=hot")
            node, gpu = parse_target(target)
            parse_fault(fault)
        except ValueError as exc:
            parser.error(f"--fault {spec}: {exc}")
        faults.append((node, gpu, fault))
    return faults


def next_grid_point(interval: float) -> float:
    """Return the next multiple of ``interval`` on the wall clock."""
    return math.ceil(time.time() / interval) * interval


# Simulated nodes all share this machine's CPU: their probes run two gloo
# ranks each, not one per simulated GPU.
SIMULATED_PROBE_RANKS = 2


class StopSignal:
    """SIGTERM/SIGINT set a flag and wake wait() through a pipe, so a sleeping loop ends at once.

    The handler only sets a flag; Python's wakeup fd interrupts the select(),
    which is safe where taking a lock inside a signal handler is not.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def __enter__(self) -> "StopSignal":
        self._previous_fd = signal.set_wakeup_fd(self._write_fd)
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True when a stop was requested."""
        if not self.requested and seconds > 0:
            select.select([self._read_fd], [], [], seconds)
            try:
                os.read(self._read_fd, 512)
            except BlockingIOError:
                pass
        return self.requested


def simulated_fleet(args: argparse.Namespace, faults: list[tuple[str, int | None, str]]) -> SimulatedFleet:
    """Build the fleet with its faults; raise ValueError naming a fault target it does not have."""
    reader = None
    if not args.stdout:
        url = args.redis_url if args.faults_url_file is None else read_redis_url_file(args.faults_url_file)
        client = node_redis_client(url, socket_timeout=1, connect_timeout=1)
        reader = redis_fault_reader(client, Keys())
    fleet = SimulatedFleet(args.nodes, args.gpus_per_node, args.interval, seed=args.seed,
                           name_prefix=args.name_prefix, fault_reader=reader, only=args.only_node,
                           without=args.except_node, mig_node=args.mig_node)
    for node, gpu, fault in faults:
        fleet.inject(node, gpu, fault)
    return fleet


def nvml_source(args: argparse.Namespace) -> Source:
    # Imported here so the simulated source runs where nvidia-ml-py is absent.
    from collectors.nvml import NvmlSource

    return NvmlSource(args.node_name or socket.gethostname(), args.interval, sysfs=args.sysfs, procfs=args.procfs,
                      group=args.group, pod_resources=args.kubelet_pod_resources, energy_interval=args.energy_interval)


def dcgm_source(args: argparse.Namespace) -> Source:
    from collectors.dcgm import DcgmSource

    return DcgmSource(args.dcgm_url, args.interval, node_name=args.node_name)


_health_errors = RateLimitedLog(log)


def check_health(health: HealthChecks, samples: list[dict]) -> None:
    """Annotate each sample with its health; a sample whose checks fail goes without (verdict unknown)."""
    now = time.time()
    for sample in samples:
        try:
            health.annotate(sample, now)
        except Exception:  # a check's bug must not stop the node's telemetry
            sample.pop("health", None)
            _health_errors.warning("health checks of node %s failed; sent without health", sample.get("node"),
                                   exc_info=True)


def run(args: argparse.Namespace, open_source: Callable[[], Source], stop: StopSignal,
        probe: ProbeRunner | None = None) -> int:
    publisher: StdoutPublisher | RedisPublisher
    if args.stdout:
        publisher = StdoutPublisher()
    else:
        publisher = RedisPublisher(args.redis_url, Keys(), buffer_size=args.buffer_size)
    source: Source | None = None
    identity = Identity()
    # Every sample of every source gets its health checked before it leaves the node.
    gpu_tests = None if args.gpu_test_record is None else GpuTestRecord(args.gpu_test_record)
    health = HealthChecks(args.expected_gpus, gpu_tests)
    retry_delay = 1.0
    # Deadlines sit on the wall clock's grid of whole intervals (as Telegraf's
    # round_interval does): NTP-synced nodes then sample together, so ingest
    # sees one burst per interval and sends its frame right after it.
    deadline = time.time()
    if probe is not None:
        probe.start()
    try:
        while not stop.wait(deadline - time.time()):
            try:
                if source is None:
                    source = open_source()
                    # The setup objects live for the whole run; frozen, the collector
                    # stops rescanning them while each big sample is being built.
                    gc.freeze()
                samples = source.sample()
            except SourceUnavailable as exc:
                if args.once:
                    print(f"gpulse collector: {exc}", file=sys.stderr)
                    return 2
                log.warning("%s; retrying in %.0f s", exc, retry_delay)
                if source is not None:
                    source.close()
                    source = None
                deadline = time.time() + retry_delay
                retry_delay = min(retry_delay * 2, SOURCE_RETRY_MAX)
                continue
            if retry_delay > 1.0:
                log.info("%s source available again", args.source)
                retry_delay = 1.0
            check_health(health, samples)
            publisher.publish(identity.stamp(samples))
            if args.once:
                if isinstance(publisher, RedisPublisher) and publisher.pending:
                    print(f"gpulse collector: Redis at {publisher.where} unreachable; the sample was not written",
                          file=sys.stderr)
                    return 1
                return 0
            missed = int((time.time() - deadline) // args.interval)
            if missed:
                log.warning("sampling took longer than the %.2f s interval; skipped %d tick(s)", args.interval, missed)
            deadline = next_grid_point(args.interval)
    finally:
        if probe is not None:
            probe.stop()
        if source is not None:
            source.close()
        publisher.close()
    return 0


def redis_url(args: argparse.Namespace) -> str:
    """--redis-url-file, else --redis-url, else the environment (gpulse.redis_url); RedisUrlError says why not."""
    if args.redis_url_file is not None:
        return read_redis_url_file(args.redis_url_file)
    if args.redis_url is not None:
        return args.redis_url
    return redis_url_from_environment()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    faults = _parse_faults(parser, args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s gpulse collector: %(message)s")
    if args.redis_url is not None and has_password(args.redis_url):
        log.warning("--redis-url holds a password, which every user of this machine can read in "
                    "/proc/<pid>/cmdline: put the URL in a file for --redis-url-file (or $%s), or in $REDIS_URL",
                    REDIS_URL_FILE_ENV)
    if not args.stdout:
        try:
            args.redis_url = redis_url(args)
        except RedisUrlError as exc:
            print(f"gpulse collector: {exc}", file=sys.stderr)
            return 2
    if args.source == "simulated":
        try:
            fleet = simulated_fleet(args, faults)
        except RedisUrlError as exc:
            print(f"gpulse collector: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            parser.error(str(exc))
        nodes, probe_ranks = fleet.published, SIMULATED_PROBE_RANKS

        def open_source() -> Source:
            return fleet
    else:
        nodes, probe_ranks = [args.node_name or socket.gethostname()], None
        open_source = {"nvml": lambda: nvml_source(args), "dcgm": lambda: dcgm_source(args)}[args.source]

    probe = None
    if args.probe_interval > 0 and not (args.once or args.stdout):
        probe = ProbeRunner(nodes, args.probe_interval, args.redis_url, args.probe_max_bytes, probe_ranks)

    try:
        with StopSignal() as stop:
            return run(args, open_source, stop, probe)
    except BrokenPipeError:
        # The reader of --stdout went away (e.g. `| head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
