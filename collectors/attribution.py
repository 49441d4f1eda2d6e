"""Whose a GPU process is: its user, command, and the container and scheduler job it runs in.

Read from procfs (``<procfs>/<pid>/comm``, ``status``, ``cmdline``, ``cgroup``), so a
collector in a container given the host's /proc attributes the host's processes.
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
from pathlib import Path

from gpulse.schema import MAX_TEXT, PROCESS_IDENTITY

PROC = Path("/proc")
# A command line may be megabytes (every sample reads it again); status and cgroup are a few KiB.
MAX_PROC_FILE = 64 * 1024

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
