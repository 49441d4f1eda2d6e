"""Every scontrol call gpulse makes: drain a node, resume it, read its state.

scontrol runs as a list of arguments, never through a shell, with a timeout;
the node name must pass gpulse's node-name rule (gpulse/schema.py) and the
reason is cut down to one short line without quotes, so nothing a node sends
can become a second argument or a different node. Every failure is a
SlurmError whose message a person can act on.
"""

import datetime as dt
import re
import subprocess
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.conf import settings

from gpulse.schema import valid_node_name

# Every reason gpulse writes starts with this: at resume time a node whose
# Slurm reason does not was drained, or re-drained, by a person.
REASON_PREFIX = "gpulse:"
# Slurm keeps longer reasons, but a reason is read in one line of `sinfo -R`.
MAX_REASON = 200
# scontrol appends "[user@2026-11-25T09:08:17]" to the reason it shows: who set it and when, in
# slurmctld's local time.
_REASON_STAMP = re.compile(r"\s*\[(?P<user>[^\[\]]*)@(?P<time>[^\[\]]*)\]\s*$")
_UNSAFE = re.compile(r"[\"'`\\\x00-\x1f\x7f]+")


class SlurmError(Exception):
    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.message = message
        # permanent: trying again cannot help (no such node, a name gpulse refuses).
        self.permanent = permanent


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # e.g. IDLE+DRAIN, MIXED+DRAIN, DOWN*+DRAIN
    reason: str  # without scontrol's "[user@time]" stamp; "" when none
    reason_user: str = ""  # who set the reason, from the stamp
    reason_time: dt.datetime | None = None  # when, from the stamp (aware); None without one

    @property
    def drained(self) -> bool:
        """Whether the node is draining or drained (the DRAIN flag, whatever the base state)."""
        return "DRAIN" in re.split(r"[+*$#~!%@^-]+", self.state.upper())

    @property
    def drained_by_gpulse(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)


def gpulse_reason(text: str) -> str:
    """Return "gpulse: <text>" on one line, without quotes or control characters, at most MAX_REASON long."""
    clean = " ".join(_UNSAFE.sub(" ", text).split())
    return f"{REASON_PREFIX} {clean}"[:MAX_REASON].rstrip()


def _checked_name(node: str) -> str:
    if not valid_node_name(node):
        raise SlurmError(f"{node[:80]!r} is not a node name gpulse accepts; scontrol was not run", permanent=True)
    return node


def _run(*args: str) -> str:
    command = [settings.GPULSE_SCONTROL, *args]
    timeout = settings.GPULSE_SCONTROL_TIMEOUT
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"scontrol {args[0]} {args[1]} got no answer within {timeout:g} s: is slurmctld up and reachable?"
        ) from None
    except FileNotFoundError:
        raise SlurmError(
            f"scontrol not found at {settings.GPULSE_SCONTROL!r}: install slurm-client or set GPULSE_SCONTROL"
        ) from None
    except OSError as exc:
        raise SlurmError(f"scontrol could not be run: {exc}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:300] or "no message"
        hint = ""
        if "Invalid node name" in said or re.search(r"Node \S+ not found", said):
            raise SlurmError(f"Slurm has no node of that name: scontrol said {said!r}", permanent=True)
        if "Unable to contact slurm controller" in said:
            hint = " (is slurmctld running, and does SLURM_CONF name the right cluster?)"
        elif "Access/permission denied" in said or "Invalid user" in said:
            hint = " (gpulse's user must be SlurmUser, root or a Slurm operator: see docs/deploy-slurm.md)"
        raise SlurmError(f"scontrol exited {done.returncode}: {said}{hint}")
    return done.stdout


def show_node(node: str) -> NodeState:
    """Return the node's state and reason as slurmctld has them now."""
    out = _run("show", "node", "--oneliner", _checked_name(node))
    return parse_show_node(node, out)


def parse_show_node(node: str, out: str) -> NodeState:
    line = next((line for line in out.splitlines() if line.startswith(f"NodeName={node} ")), None)
    if line is None:
        raise SlurmError(f"scontrol show node did not describe {node}: {out[:200]!r}")
    state = re.search(r"(?:^|\s)State=(\S+)", line)
    # The reason is free text with spaces; scontrol prints it as the line's last field.
    reason = re.search(r"(?:^|\s)Reason=(.*)$", line)
    text = reason.group(1) if reason else ""
    stamp = _REASON_STAMP.search(text)
    return NodeState(
        name=node,
        state=state.group(1) if state else "",
        reason=_REASON_STAMP.sub("", text).strip(),
        reason_user=stamp.group("user") if stamp else "",
        reason_time=_stamp_time(stamp.group("time")) if stamp else None,
    )


def _stamp_time(text: str) -> dt.datetime | None:
    """The stamp's time, in GPULSE_SLURM_TIME_ZONE (slurmctld's); None when it is not one scontrol writes."""
    try:
        local = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return local.replace(tzinfo=ZoneInfo(settings.GPULSE_SLURM_TIME_ZONE))


def drain(node: str, reason: str) -> None:
    """Drain ``node`` with ``reason`` (already made by gpulse_reason)."""
    _run("update", f"NodeName={_checked_name(node)}", "State=DRAIN", f"Reason={reason}")


def resume(node: str) -> None:
    _run("update", f"NodeName={_checked_name(node)}", "State=RESUME")
