"""A real Slurm cluster of one node for tests: munged, slurmctld and one slurmd (Debian's slurm-wlm, munge).

Everything lives in a temporary directory: its own munge key, socket, pid
and log files, a minimal slurm.conf naming free ports, the controller's state.
`scontrol` reaches it through SLURM_CONF (set for the test, and for any
process it starts). The daemons run as the current user (SlurmUser = that
user), so root is not needed. Tests are skipped only when the binaries are
missing (`make slurm` installs them).
"""

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol")
NODE = "gpu-slurm-01"


def _binary(name: str) -> str | None:
    # The daemons are in /usr/sbin, which a non-root PATH often lacks.
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")


def slurm_binaries_missing() -> list[str]:
    return [name for name in BINARIES if _binary(name) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, directory: Path, node: str = NODE):
        self.dir = directory
        self.node = node
        self.conf = directory / "slurm.conf"
        self.munge_socket = directory / "munge.sock"
        self.processes: dict[str, subprocess.Popen] = {}

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _spawn(self, name: str, binary: str, *args: str) -> None:
        log = open(self.dir / f"{name}.out", "wb")
        self.processes[name] = subprocess.Popen(
            [_binary(binary) or binary, *args],
            cwd=self.dir, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def _write_conf(self) -> None:
        user = getpass.getuser()
        d = self.dir
        (d / "state").mkdir()
        (d / "spool").mkdir()
        self.conf.write_text(
            f"""ClusterName=gpulsetest
SlurmctldHost=localhost
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={self.node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=test Nodes={self.node} Default=YES State=UP
"""
        )

    def start(self, timeout: float = 30.0) -> "SlurmCluster":
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.dir.chmod(0o755)  # munged wants the socket's directory reachable by all
        self._spawn(
            "munged", "munged", "--foreground", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={self.dir / 'munged.pid'}", f"--log-file={self.dir / 'munged.log'}",
            f"--seed-file={self.dir / 'munged.seed'}",
        )
        self._wait(lambda: self.munge_socket.exists(), "munged", timeout)
        self._write_conf()
        self._spawn("slurmctld", "slurmctld", "-D", "-i")
        self._wait(lambda: "is UP" in self.scontrol("ping").stdout, "slurmctld", timeout)
        self._spawn("slurmd", "slurmd", "-D", "-N", self.node)
        self._wait(lambda: self.show()["State"].split("+")[0].rstrip("*") == "IDLE", "slurmd", timeout)
        return self

    def _wait(self, ready, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            process = self.processes.get(name)
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(self.dir.glob("*.out"))
                    + sorted(self.dir.glob("*.log")) if p.exists()
                )
                raise RuntimeError(f"{name} did not start within {timeout:g} s:\n{logs}")
            time.sleep(0.1)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        command = [_binary("scontrol") or "scontrol", *args]
        return subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=30)

    def show(self) -> dict:
        """Return the node's fields as `scontrol show node -o` prints them (Reason: the rest of the line)."""
        out = self.scontrol("show", "node", "-o", self.node).stdout.strip()
        head, _, reason = out.partition(" Reason=")
        fields = dict(part.split("=", 1) for part in head.split() if "=" in part)
        fields["Reason"] = reason
        return fields

    def drain_as_person(self, reason: str) -> None:
        done = self.scontrol("update", f"NodeName={self.node}", "State=DRAIN", f"Reason={reason}")
        assert done.returncode == 0, done.stderr

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def _stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)


@pytest.fixture
def slurm_cluster(tmp_path_factory, monkeypatch):
    """A running one-node Slurm cluster, SLURM_CONF pointing at it for the test."""
    if missing := slurm_binaries_missing():
        pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}): run `make slurm` (as root)")
    # A short path: the munge socket's path must fit in a sockaddr_un (108 bytes).
    directory = Path(tmp_path_factory.mktemp("slurm", numbered=True))
    cluster = SlurmCluster(directory)
    try:
        cluster.start()
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        yield cluster
    finally:
        cluster.stop()
