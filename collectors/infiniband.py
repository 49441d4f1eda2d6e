"""This node's InfiniBand/RoCE ports, read from sysfs as node_exporter's infiniband collector does.

For each ``<sysfs>/class/infiniband/<device>/ports/<n>/``: ``state`` ("4: ACTIVE"),
``phys_state`` ("5: LinkUp"), ``rate`` ("400 Gb/sec (4X NDR)") and the
``counters/`` symbol_error, link_downed and port_rcv_errors (one number each).
Each port becomes one entry of the sample's ``ib`` list (gpulse/schema.py).

A node without ``class/infiniband`` (no RDMA driver loaded, no HCA) has no
ports: the list is empty, which the checks read as "nothing to check", not as
unknown. A file that is missing gives that field null; one that cannot be read
or parsed gives null and a rate-limited warning. Nothing here raises.
"""

import logging
import os
import re
from pathlib import Path

from gpulse.ratelog import RateLimitedLog
from gpulse.schema import IB_COUNTERS, MAX_IB_PORTS, MAX_IB_TEXT

log = RateLimitedLog(logging.getLogger(__name__))

CLASS_PATH = Path("class", "infiniband")
# "4: ACTIVE" -> "ACTIVE": the number is the IB spec's enum, the name what ibstat shows.
_STATE = re.compile(r"\d+: ?(\S.*)")
# "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)" -> 400.0, 2.5 (Gb/s)
_RATE = re.compile(r"(\d+(?:\.\d+)?) Gb/sec\b.*")
# Counters read "N/A (no PMA)" on ports without a performance management agent (node_exporter#966).
_NOT_AVAILABLE = "N/A"
_MAX_FILE = 256  # every file read here holds one short line


def _read(path: Path) -> str | None:
    """The file's text without the final newline; None when it does not exist or cannot be read."""
    try:
        with open(path, "rb") as file:
            raw = file.read(_MAX_FILE)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("InfiniBand: cannot read %s (%s); reporting null", path, exc.strerror or exc)
        return None
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        log.warning("InfiniBand: %s is not text; reporting null", path)
        return None


def _parsed(path: Path, pattern: re.Pattern, what: str) -> str | None:
    text = _read(path)
    if text is None:
        return None
    match = pattern.fullmatch(text)
    if match is None or len(match.group(1)) > MAX_IB_TEXT:
        log.warning("InfiniBand: %s is not %s: %r; reporting null", path, what, text[:40])
        return None
    return match.group(1)


def _counter(path: Path) -> int | None:
    text = _read(path)
    if text is None or text.startswith(_NOT_AVAILABLE):
        return None
    if not text.isdigit():  # isdigit refuses signs, spaces and the empty file
        log.warning("InfiniBand: %s is not a counter: %r; reporting null", path, text[:40])
        return None
    return int(text)


def read_port(device: str, port: str, folder: Path) -> dict:
    """One port's entry of the sample's ``ib`` list."""
    rate = _parsed(folder / "rate", _RATE, "a rate like '400 Gb/sec (4X NDR)'")
    reading = {
        "port": f"{device}/{port}",
        "state": _parsed(folder / "state", _STATE, "a state like '4: ACTIVE'"),
        "phys_state": _parsed(folder / "phys_state", _STATE, "a state like '5: LinkUp'"),
        "rate": None if rate is None else float(rate),
    }
    for name in IB_COUNTERS:
        reading[name] = _counter(folder / "counters" / name)
    return reading


def _entries(folder: Path) -> list[str]:
    """The names in ``folder``, sorted; [] when it does not exist or cannot be listed."""
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("InfiniBand: cannot list %s (%s)", folder, exc.strerror or exc)
        return []


def read_ports(sysfs: Path) -> list[dict]:
    """Every InfiniBand/RoCE port under ``sysfs`` (at most MAX_IB_PORTS, in name order)."""
    ports: list[dict] = []
    root = sysfs / CLASS_PATH
    for device in _entries(root):
        for port in _entries(root / device / "ports"):
            name = f"{device}/{port}"
            if len(name) > MAX_IB_TEXT:
                log.warning("InfiniBand: port name %r is longer than %d characters; left out",
                            name[:MAX_IB_TEXT], MAX_IB_TEXT)
                continue
            if len(ports) == MAX_IB_PORTS:
                log.warning("InfiniBand: more than %d ports under %s; the rest are left out", MAX_IB_PORTS, root)
                return ports
            ports.append(read_port(device, port, root / device / "ports" / port))
    return ports
