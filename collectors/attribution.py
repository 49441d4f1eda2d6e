"""Whose a GPU process is: its user, command, and the container and scheduler job it runs in.

Read from procfs (``<procfs>/<pid>/comm``, ``status``, ``cmdline``, ``cgroup``), so a
collector in a container given the host's /proc attributes the host's processes;
ProcessDescriptions keeps what was read while ``stat`` shows the same process.
The scheduler identity comes from the cgroup path the process lives in, which
Slurm, the kubelet and docker name by fixed rules (``CGROUP_FORMATS``). A path
in no known format is left unattributed: guessing would bill the wrong job.

The paths must be as the host's cgroup namespace shows them: a collector in its
own cgroup namespace sees other cgroups as ``/../..``-relative paths, which no
format here matches.
"""

import functools
import pwd
import re
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import NamedTuple

from gpulse.schema import MAX_TEXT, PROCESS_IDENTITY

PROC = Path("/proc")
# A command line may be megabytes; status and cgroup are a few KiB.
MAX_PROC_FILE = 64 * 1024
# Seconds a process's description is kept before it is read again (ProcessDescriptions says why).
DESCRIPTION_MAX_AGE = 60.0
# Descriptions kept at most: far above a node's GPU processes (8 GPUs with 48 MPS clients each is 384).
MAX_DESCRIPTIONS = 4096

# The ids are matched whole (digits, a UUID, 64 hex digits) and every pattern is anchored at
# the root: a user who may create cgroups (a systemd user slice, a delegated job subtree) only
# does so below a path of their own, so they can neither name another job nor smuggle text in.
_JOB = r"job_(?P<job>\d{1,10})/step_(?P<step>\d{1,10}|batch|extern|interactive)"
# A lowercase UUID as the kubelet and NVML write it (pod UIDs, GPU UUIDs).
UUID = "-".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12))
# In a systemd unit name "-" separates the slices above it, so the kubelet writes the UID's dashes as "_".
_UUID_UNDERSCORES = "_".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12))
_CONTAINER = r"(?P<container>[0-9a-f]{64})"
_BELOW = r"(?:/.*)?"  # the cgroups a job or container made inside its own

CGROUP_FORMATS = (
    # Slurm's cgroup/v1 plugin: /slurm/uid_1000/job_1234/step_0/task_0
    re.compile(rf"/slurm/uid_\d{{1,10}}/{_JOB}{_BELOW}"),
    # Slurm's cgroup/v2 plugin: /system.slice/slurmstepd.scope/job_1234/step_0/user/task_0, and
    # <node>_slurmstepd.scope where one host runs several slurmd (--enable-multiple-slurmd).
    re.compile(rf"/system\.slice/(?:[A-Za-z0-9][A-Za-z0-9.-]*_)?slurmstepd\.scope/{_JOB}{_BELOW}"),
    # The kubelet's cgroupfs driver: /kubepods[/burstable|/besteffort]/pod<uid>/<container id>;
    # a Guaranteed pod has no QoS level.
    re.compile(rf"/kubepods(?:/burstable|/besteffort)?/pod(?P<pod_uid>{UUID})/{_CONTAINER}{_BELOW}"),
    # The kubelet's systemd driver: /kubepods.slice/kubepods-burstable.slice/
    # kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope (docker-, crio- by runtime).
    re.compile(
        r"/kubepods\.slice(?:/kubepods-(?P<qos>burstable|besteffort)\.slice)?"
        rf"/kubepods(?(qos)-(?P=qos))-pod(?P<pod_uid>{_UUID_UNDERSCORES})\.slice"
        rf"/(?:cri-containerd|docker|crio)-{_CONTAINER}\.scope{_BELOW}"),
    # Docker outside Kubernetes: /docker/<id> (cgroupfs driver), /system.slice/docker-<id>.scope (systemd).
    re.compile(rf"/docker/{_CONTAINER}{_BELOW}"),
    re.compile(rf"/system\.slice/docker-{_CONTAINER}\.scope{_BELOW}"),
)


def _identity(path: str) -> dict:
    for pattern in CGROUP_FORMATS:
        match = pattern.fullmatch(path)
        if match:
            found = match.groupdict()
            found.pop("qos", None)
            if found.get("pod_uid"):
                found["pod_uid"] = found["pod_uid"].replace("_", "-")
            return {key: value for key, value in found.items() if value is not None}
    return {}


def parse_cgroup(text: str) -> dict:
    """Return the job, step, pod_uid and container that ``/proc/<pid>/cgroup`` places a process in.

    cgroup v1 lists one ``id:controllers:path`` line per hierarchy, v2 the one
    line ``0::path``. The first line whose path is in a known format answers: on
    v1 the hierarchies that hold the job (memory, devices, freezer) agree, and
    the others stay at ``/`` or a systemd unit. No known format: {}.
    """
    for line in text.splitlines():
        fields = line.split(":", 2)  # a cgroup name may itself hold ":"
        if len(fields) == 3:
            identity = _identity(fields[2])
            if identity:
                return identity
    return {}


def _read(path: Path) -> str | None:
    """The file's text, its first MAX_PROC_FILE bytes; None when the process is gone, hidden (hidepid)
    or in another PID namespace."""
    try:
        with path.open("rb") as file:
            return file.read(MAX_PROC_FILE).decode(errors="replace")
    except OSError:
        return None


def _text(value: str | None) -> str | None:
    return value[:MAX_TEXT] if value else None


@functools.lru_cache(maxsize=4096)
def _user_name(uid: int) -> str:
    """The uid's name; cached, as every sample asks again and a directory service (LDAP, SSSD) may be remote."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        # Not in this node's passwd (a directory user the collector's container cannot
        # resolve): the uid's digits, which the control host can still map to a person.
        return str(uid)


def _user(status: str | None) -> str | None:
    """The name of the process's real uid, from the ``Uid:`` line of ``/proc/<pid>/status``."""
    for line in (status or "").splitlines():
        if line.startswith("Uid:"):
            fields = line.split()  # Uid: real, effective, saved, filesystem; the real uid owns the work
            try:
                return _user_name(int(fields[1]))
            except (IndexError, ValueError):
                return None
    return None


def describe_process(pid: int, mem_used: int | None, procfs: Path = PROC) -> dict:
    """Return the sample's process object: pid, name, user, mem_used, cmd, job, step, pod_uid, container.

    Anything procfs does not tell (the process is gone, or in another PID
    namespace) is None; it never raises.
    """
    folder = procfs / str(pid)
    comm = _read(folder / "comm")
    cmdline = _read(folder / "cmdline")
    identity = dict.fromkeys(PROCESS_IDENTITY)
    identity.update(parse_cgroup(_read(folder / "cgroup") or ""))
    # The arguments are NUL-separated (and NUL-terminated): shown as a shell would print them.
    identity["cmd"] = cmdline.replace("\0", " ").strip() if cmdline else None
    return {
        "pid": pid,
        "name": _text(comm.rstrip("\n") if comm else None),
        "user": _text(_user(_read(folder / "status"))),
        "mem_used": mem_used,
        **{key: _text(value) for key, value in identity.items()},
    }


class StatIdentity(NamedTuple):
    """What ``/proc/<pid>/stat`` tells of a process: when it started (field 22, clock ticks after
    boot) and its name (field 2)."""

    start: int
    name: str


def read_identity(pid: int, procfs: Path = PROC) -> StatIdentity | None:
    """The process's start time and name, from ``<procfs>/<pid>/stat``; None where it cannot be read."""
    stat = _read(procfs / str(pid) / "stat")
    if stat is None:
        return None
    # The name is in parentheses and may itself hold ")" and spaces: the fields follow the last ")".
    head, _, rest = stat.rpartition(")")
    fields = rest.split()  # from field 3 (state)
    try:
        return StatIdentity(int(fields[19]), head.partition("(")[2])
    except (IndexError, ValueError):
        return None


class _Description(NamedTuple):
    identity: StatIdentity | None
    read_at: float  # monotonic s
    process: dict  # describe_process's, mem_used None


class ProcessDescriptions:
    """describe_process for the GPUs' reader threads, which share it: each process is read from procfs
    at most once a sample, however many GPUs and MIG instances list it, and kept across samples.

    A process is known by its pid and its start time (``/proc/<pid>/stat``, read every sample): a pid
    the kernel hands to a new process comes with a later start time, so the new process is read afresh
    and never billed to the pid's previous owner. A pid whose stat cannot be read is read every sample.

    What is kept can change in a live process, rarely; it is read again when the name in stat changes
    and at the latest after ``max_age`` seconds, so a change shows within a minute:
    - the name and the command line: exec (same pid, same start time) and setproctitle (Ray's workers,
      Celery's) change both, and the name is compared every sample;
    - the user, the real uid: only a privileged process changes it (setuid), before it works as its user;
    - the job, step, pod and container, from the cgroup: a process is moved by writing its pid to another
      cgroup; Slurm, the kubelet and docker never move one between jobs or containers, and
      pam_slurm_adopt adopts an ssh session's processes at login, before they use a GPU.
    The memory used (and the utilization beside it) is the sample's own, never kept.
    """

    def __init__(self, procfs: Path = PROC, max_age: float = DESCRIPTION_MAX_AGE, max_size: int = MAX_DESCRIPTIONS):
        self._procfs = procfs
        self._max_age = max_age
        self._max_size = max_size
        self._lock = threading.Lock()
        # pid -> the sample that listed it last, and its description, still being read while not done
        self._kept: dict[int, tuple[int, Future]] = {}
        self._sample = 0

    def __contains__(self, pid: int) -> bool:
        return pid in self._kept

    def __len__(self) -> int:
        return len(self._kept)

    def new_sample(self) -> None:
        """Start the next sample; forget the processes that the last one did not list (ended, or off the GPUs)."""
        with self._lock:
            self._kept = {pid: kept for pid, kept in self._kept.items() if kept[0] == self._sample}
            self._sample += 1

    def describe(self, pid: int, mem_used: int | None) -> dict:
        """describe_process(pid, mem_used): read from procfs once a sample, or kept from an earlier one."""
        with self._lock:
            sample, before = self._kept.pop(pid, (None, None))
            if before is not None and sample == self._sample:  # another reader listed it this sample
                description, reading = before, False
            else:
                description, reading = Future(), True
                if len(self._kept) >= self._max_size:
                    del self._kept[next(iter(self._kept))]  # the one least recently listed
            self._kept[pid] = (self._sample, description)  # last: the most recently listed
        if reading:
            # Another reader listing the process this sample waits for this read, as it would have
            # waited on the same files: each stands in for the other.
            try:
                description.set_result(self._read(pid, before))
            except BaseException as error:  # whatever it is, the readers waiting for it must not wait for ever
                description.set_exception(error)
                raise
        return {**description.result().process, "mem_used": mem_used}

    def _read(self, pid: int, before: Future | None) -> _Description:
        identity = read_identity(pid, self._procfs)
        now = time.monotonic()
        # A read still under way in a reader stuck since an earlier sample is not waited for.
        kept = before.result() if before is not None and before.done() and not before.exception() else None
        if (kept is not None and identity is not None and kept.identity == identity
                and now - kept.read_at < self._max_age):
            return kept
        return _Description(identity, now, describe_process(pid, None, self._procfs))
