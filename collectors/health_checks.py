"""The collector's health checks: a sample's readings in, its "health" object out.

One function per GPU or node check of the catalogue (gpulse/health.py, where the
rules, thresholds and actions are). A GPU check returns None when it passes, or
(status, reason). A reading the sample leaves null makes that check "unknown"
for the GPU, never "pass": the GPU or the source cannot read it. When no GPU of
a node reports it, one finding for the node says so instead of one per GPU.

HealthChecks keeps what a check needs from earlier samples (counters for rates,
the GPUs first seen, the last Xids), per node: one instance serves a whole
simulated fleet. It runs for every GPU every second, so the passing case is a
few dict lookups and comparisons; reasons are only built for findings.
"""

from collectors.gpu_test_record import CHECK as GPU_TESTS
from collectors.gpu_test_record import GpuTestRecord
from gpulse.health import (
    BUSY_UTIL,
    CHECKS,
    FAIL,
    GPU,
    IB_COUNTER_WINDOW,
    NODE,
    NVLINK_ERRORS_PER_SECOND,
    PCIE_REPLAY_PER_MINUTE,
    RETIRED_PAGES_LIMIT,
    UNKNOWN,
    WARN,
    XID_WINDOW,
)
from gpulse.schema import IB_COUNTERS, MAX_FINDINGS, MAX_REASON, MAX_XIDS
from gpulse.throttle import SLOWDOWNS
from gpulse.xid import classify

Result = tuple[str, str] | None  # (status, reason), or None for a pass


class GpuMemory:
    """What the checks of one GPU keep between samples."""

    __slots__ = ("replay", "nvlink", "xids")

    def __init__(self):
        self.replay: tuple[float, float] | None = None  # (time, pcie_replay) of the previous reading
        self.nvlink: tuple[float, float] | None = None  # (time, nvlink_errors)
        self.xids: dict[int, float] = {}  # Xid code -> when it was last reported


class NodeMemory:
    __slots__ = ("gpus", "seen", "ib")

    def __init__(self):
        self.gpus: dict[int, GpuMemory] = {}
        self.seen: set[int] = set()  # every GPU index the node has listed since the collector started
        # port -> (its counters at the previous reading, counter -> (when it last rose, by how much))
        self.ib: dict[str, tuple[tuple, dict[str, tuple[float, float]]]] = {}


def _unreported(what: str) -> tuple[str, str]:
    return UNKNOWN, f"{what} not reported (not supported by this GPU or this source)"


def _busy(gpu: dict) -> bool:
    util = gpu.get("util")
    return util is not None and util >= BUSY_UTIL


def _rate(previous: tuple[float, float] | None, now: float,
          count: float | None) -> tuple[tuple[float, float] | None, float | None]:
    """Return (what to keep, the counter's rise per second since ``previous``, 0 when there is none yet).

    Both are None when the sample does not report the counter: its next reading starts over.
    """
    if count is None:
        return None, None
    if previous is None:
        return (now, count), 0.0
    then, before = previous
    if now <= then:
        return previous, 0.0
    if count < before:  # the counter was reset (a driver reload or GPU reset): start over
        return (now, count), 0.0
    return (now, count), (count - before) / (now - then)


# ---- GPU checks ------------------------------------------------------------------

_NO_PCIE = _unreported("PCIe link width")


def pcie_link(gpu: dict, memory: GpuMemory, now: float) -> Result:
    width, width_max = gpu.get("pcie_width"), gpu.get("pcie_width_max")
    if width is None or width_max is None:
        return _NO_PCIE
    gen, gen_max = gpu.get("pcie_gen"), gpu.get("pcie_gen_max")
    narrow = width < width_max
    if gen is None or gen_max is None:
        lanes = f"x{width:g} of x{width_max:g} lanes"
        if narrow:
            return FAIL, f"{lanes}, generation not reported"
        return UNKNOWN, f"{lanes}; PCIe link generation not reported"
    slow = gen < gen_max and _busy(gpu)
    if not narrow and not slow:
        return None  # before any text is written: every GPU of every sample passes here
    link = f"x{width:g} of x{width_max:g} lanes, Gen{gen:g} of Gen{gen_max:g}"
    if narrow:
        return FAIL, link
    return WARN, f"{link} while busy ({gpu['util']:g} %)"


_NO_REPLAY = _unreported("PCIe replay counter")


def pcie_replay(gpu: dict, memory: GpuMemory, now: float) -> Result:
    count = gpu.get("pcie_replay")
    memory.replay, per_second = _rate(memory.replay, now, count)
    if per_second is None:
        return _NO_REPLAY
    per_minute = per_second * 60
    if per_minute > PCIE_REPLAY_PER_MINUTE:
        return WARN, f"{per_minute:.0f} PCIe replays per minute ({count:g} since the driver loaded)"
    return None


_NO_REMAP = _unreported("row remapping")


def _rows(gpu: dict) -> str:
    uncorrectable, correctable = gpu.get("remapped_uncorrectable"), gpu.get("remapped_correctable")
    if uncorrectable is None or correctable is None:
        return ""
    return f" (rows remapped: {uncorrectable:g} for uncorrectable errors, {correctable:g} for correctable)"


def row_remap(gpu: dict, memory: GpuMemory, now: float) -> Result:
    pending, failure = gpu.get("remap_pending"), gpu.get("remap_failure")
    if pending is None and failure is None:
        if gpu.get("retired_pages") is not None or gpu.get("retired_pending") is not None:
            return None  # a GPU that retires pages instead: retired_pages checks it
        return _NO_REMAP
    if failure:
        return FAIL, f"row remapping failed{_rows(gpu)}"
    if pending:
        return WARN, f"a row remap waits for a GPU reset{_rows(gpu)}"
    return None


_NO_RETIRED = _unreported("page retirement")


def retired_pages(gpu: dict, memory: GpuMemory, now: float) -> Result:
    if gpu.get("remap_pending") is not None or gpu.get("remap_failure") is not None:
        return None  # a GPU with row remapping does not retire pages: row_remap checks it
    pages, pending = gpu.get("retired_pages"), gpu.get("retired_pending")
    if pages is None and pending is None:
        return _NO_RETIRED
    if pages is not None and pages >= RETIRED_PAGES_LIMIT:
        return FAIL, f"{pages:g} pages retired (the limit is {RETIRED_PAGES_LIMIT})"
    if pending:
        return WARN, "a page retirement waits for a reboot" + ("" if pages is None else f" ({pages:g} retired)")
    if pages is None:
        return UNKNOWN, "retired page count not reported"
    if pending is None:
        return UNKNOWN, f"{pages:g} pages retired; whether a retirement is pending is not reported"
    return None


_NO_ECC_MODE = _unreported("ECC mode")


def ecc_mode(gpu: dict, memory: GpuMemory, now: float) -> Result:
    enabled, pending = gpu.get("ecc_enabled"), gpu.get("ecc_pending")
    if enabled is None:
        return _NO_ECC_MODE
    if enabled is False:
        return WARN, "ECC is off" + ("; a mode change waits for a reboot" if pending else "")
    if pending:
        return WARN, "an ECC mode change waits for a reboot"
    return None


_NO_ECC_COUNT = _unreported("uncorrectable ECC error count")


def ecc_uncorrected(gpu: dict, memory: GpuMemory, now: float) -> Result:
    errors = gpu.get("ecc_uncorrected")
    if errors is None:
        return _NO_ECC_COUNT
    if errors > 0:
        return FAIL, f"{errors:g} uncorrectable ECC errors since the driver loaded"
    return None


_NO_NVLINK = _unreported("NVLink link state")


def nvlink_state(gpu: dict, memory: GpuMemory, now: float) -> Result:
    links, up = gpu.get("nvlink_links"), gpu.get("nvlink_links_up")
    if links is None or up is None:
        return _NO_NVLINK
    # All links down is a GPU whose NVLink is not in use (no bridge); some down is a broken link.
    if 0 < up < links:
        return FAIL, f"{links - up:g} of {links:g} links down, {up:g} up"
    return None


_NO_NVLINK_ERRORS = _unreported("NVLink error counters")


def nvlink_errors(gpu: dict, memory: GpuMemory, now: float) -> Result:
    memory.nvlink, per_second = _rate(memory.nvlink, now, gpu.get("nvlink_errors"))
    if per_second is None:
        return None if gpu.get("nvlink_links") == 0 else _NO_NVLINK_ERRORS
    if per_second > NVLINK_ERRORS_PER_SECOND:
        return WARN, f"{per_second:.1f} NVLink CRC, replay or recovery errors per second"
    return None


_NO_XID = _unreported("Xid events")


def xid(gpu: dict, memory: GpuMemory, now: float) -> Result:
    codes, seen = gpu.get("xid"), memory.xids
    if codes:
        for code in codes:
            seen.pop(code, None)  # re-inserted: the dict stays in order of last report
            seen[code] = now
        while len(seen) > MAX_XIDS:
            del seen[next(iter(seen))]
    if not seen:
        return _NO_XID if codes is None else None
    for code in [code for code, at in seen.items() if now - at > XID_WINDOW]:
        del seen[code]
    if not seen:
        return None
    # The worst Xid of the window, the latest of those: a fatal Xid is not hidden by the
    # application Xids (45, 43) that usually follow it.
    infos = [classify(code) for code in seen]
    worst = max(reversed(infos), key=lambda info: info.severity == FAIL)
    others = len(infos) - 1
    also = f" (and {others} other Xid{'s' if others > 1 else ''} in {XID_WINDOW // 60} minutes)" if others else ""
    reason = f"Xid {worst.code} ({worst.kind}): {worst.description}{also}. {worst.action}"
    return worst.severity, reason[:MAX_REASON]


_NO_THROTTLE = _unreported("clock event reasons")


def clocks(gpu: dict, memory: GpuMemory, now: float) -> Result:
    throttle = gpu.get("throttle")
    if throttle is None:
        return _NO_THROTTLE
    if not throttle or not _busy(gpu):
        return None
    slowdowns = [SLOWDOWNS[reason] for reason in throttle if reason in SLOWDOWNS]
    if slowdowns:
        return WARN, f"{', '.join(slowdowns)} while busy ({gpu['util']:g} %)"
    return None


_NO_CONFIG = _unreported("persistence, compute and MIG mode")


def config(gpu: dict, memory: GpuMemory, now: float) -> Result:
    persistence, mode, mig_pending = gpu.get("persistence"), gpu.get("compute_mode"), gpu.get("mig_pending")
    if persistence is None and mode is None and mig_pending is None:
        return _NO_CONFIG
    if persistence is not False and mig_pending is not True and (mode is None or mode.lower() != "prohibited"):
        return None
    problems = []
    if persistence is False:
        problems.append("persistence mode off")
    if mode is not None and mode.lower() == "prohibited":
        problems.append("compute mode Prohibited")
    if mig_pending:
        problems.append("a MIG mode change waits for a GPU reset")
    return WARN, "; ".join(problems)


GPU_CHECKS = (
    ("pcie_link", pcie_link), ("pcie_replay", pcie_replay), ("row_remap", row_remap),
    ("retired_pages", retired_pages), ("ecc_mode", ecc_mode), ("ecc_uncorrected", ecc_uncorrected),
    ("nvlink_state", nvlink_state), ("nvlink_errors", nvlink_errors), ("xid", xid), ("clocks", clocks),
    ("config", config),
)


# ---- node checks: each returns findings -------------------------------------------

def _finding(check: str, gpu: int | None, status: str, reason: str) -> dict:
    return {"check": check, "gpu": gpu, "status": status, "reason": reason[:MAX_REASON]}


def gpu_count(sample: dict, memory: NodeMemory, expected_gpus: int | None) -> list[dict]:
    """Fail for each GPU lost or gone since first seen, and for GPUs short of --expected-gpus."""
    gpus = sample["gpus"]
    listed = {gpu["index"] for gpu in gpus}
    lost = sorted(gpu["index"] for gpu in gpus if gpu.get("lost"))
    memory.seen |= listed
    gone = sorted(memory.seen - listed)
    expected = max(expected_gpus or 0, len(memory.seen))
    if not lost and not gone and len(listed) >= expected:
        return []
    answering = len(listed) - len(lost)
    findings = [_finding("gpu_count", index, FAIL, f"GPU {index} fell off the bus: {answering} of {expected} answer")
                for index in lost]
    findings += [_finding("gpu_count", index, FAIL, f"GPU {index} missing: {answering} of {expected} on the bus")
                 for index in gone]
    if len(listed) + len(gone) < expected:  # fewer than configured, and not one the collector saw go
        findings.append(_finding("gpu_count", None, FAIL, f"{answering} of {expected} GPUs on the bus"))
    return findings


def _state(text) -> str:
    """ "ACTIVE" from "ACTIVE" or from sysfs's "4: ACTIVE"."""
    return "" if text is None else text.rpartition(" ")[2]


def ib_port(sample: dict, memory: NodeMemory, now: float) -> list[dict]:
    """One finding for all of the node's ports: the worst status, every port's problem in the reason."""
    ports = sample.get("ib")
    if ports is None:
        return [_finding("ib_port", None, UNKNOWN,
                         "InfiniBand/RoCE ports not reported (this source does not read them)")]
    rates = [port["rate"] for port in ports if port.get("rate") is not None]
    fastest = max(rates, default=None)
    down, slow = [], []
    known = memory.ib
    for port in ports:
        get = port.get
        name, state, physical, rate = port["port"], _state(get("state")), _state(get("phys_state")), get("rate")
        counters = tuple(map(get, IB_COUNTERS))
        previous, rises = known.get(name) or (counters, {})
        if previous != counters:
            for counter, before, value in zip(IB_COUNTERS, previous, counters, strict=True):
                if before is not None and value is not None and value > before:
                    rises[counter] = (now, value - before)
        known[name] = (counters, rises)
        if state != "ACTIVE" or physical != "LinkUp":
            down.append(f"{name} {state or 'state unknown'}/{physical or 'physical state unknown'}")
            continue
        if rate is not None and fastest is not None and rate < fastest:
            slow.append(f"{name} at {rate:g} Gb/s, the node's other ports at up to {fastest:g}")
        for counter, (at, by) in list(rises.items()):
            if now - at > IB_COUNTER_WINDOW:
                del rises[counter]
            else:
                slow.append(f"{name} {counter} rose by {by:g}")
    if not down and not slow:
        return []
    return [_finding("ib_port", None, FAIL if down else WARN, "; ".join(down + slow))]


# ---- the whole sample --------------------------------------------------------------

# What the collector checks from the readings: every GPU and node check but the recorded GPU tests.
CHECKED = [check.id for check in CHECKS if check.scope in (GPU, NODE) and check.id != GPU_TESTS]
_RANK = {FAIL: 0, WARN: 1, UNKNOWN: 2}


class HealthChecks:
    """Set sample["health"] from the sample's readings, remembering per node what rates and windows need."""

    def __init__(self, expected_gpus: int | None = None, gpu_tests: GpuTestRecord | None = None):
        self.expected_gpus = expected_gpus
        # The node's recorded GPU test results (collector --gpu-test-record): a check only where given.
        self.gpu_tests = gpu_tests
        self.checked = CHECKED + [GPU_TESTS] if gpu_tests is not None else CHECKED
        self._nodes: dict[str, NodeMemory] = {}

    def annotate(self, sample: dict, now: float) -> None:
        node = self._nodes.get(sample["node"])
        if node is None:
            node = self._nodes[sample["node"]] = NodeMemory()
        findings: list[dict] = []
        unknown: dict[str, list[tuple[int, str]]] = {}
        answering = 0
        memories = node.gpus
        for gpu in sample["gpus"]:
            if gpu.get("lost"):
                continue  # every reading is null: gpu_count reports it, once
            answering += 1
            index = gpu["index"]
            memory = memories.get(index)
            if memory is None:
                memory = memories[index] = GpuMemory()
            for check_id, check in GPU_CHECKS:
                result = check(gpu, memory, now)
                if result is None:
                    continue
                status, reason = result
                if status == UNKNOWN:
                    unknown.setdefault(check_id, []).append((index, reason))
                else:
                    findings.append({"check": check_id, "gpu": index, "status": status, "reason": reason})
        for check_id, gpus in unknown.items():
            if answering > 1 and len(gpus) == answering:
                reason = gpus[0][1].replace("this GPU", "these GPUs")
                findings.append(_finding(check_id, None, UNKNOWN, f"all {answering} GPUs: {reason}"))
            else:
                findings.extend({"check": check_id, "gpu": index, "status": UNKNOWN, "reason": reason}
                                for index, reason in gpus)
        findings += gpu_count(sample, node, self.expected_gpus)
        findings += ib_port(sample, node, now)
        if self.gpu_tests is not None:
            findings += self.gpu_tests.findings()
        if len(findings) > MAX_FINDINGS:  # a node of 256 broken GPUs: keep the worst
            findings.sort(key=lambda finding: _RANK[finding["status"]])
            del findings[MAX_FINDINGS:]
        sample["health"] = {"checked": list(self.checked), "findings": findings}
