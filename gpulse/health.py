"""Node health: the catalogue of checks, what each status means and what to do.

Every check gives pass / warn / fail / unknown for one GPU, one node, or one
node against the rest of the cluster. The collector runs the GPU and node
checks (collectors/health_checks.py) and sends only what is not "pass" as
findings (docs/ARCHITECTURE.md, "Node health"); the control host adds the
cluster checks (version skew, and the fabric diagnostics' results) and turns
the findings into a verdict per node. The actions are
written here, on the trusted side: a node sends a check id and its reason, never
the words an operator is told to act on.

Each Check names where its rule comes from, so the thresholds can be traced.
"""

from dataclasses import dataclass

PASS, WARN, FAIL, UNKNOWN = "pass", "warn", "fail", "unknown"
STATUSES = (PASS, WARN, FAIL, UNKNOWN)
# What a finding may say: "pass" is the absence of a finding.
FINDING_STATUSES = (WARN, FAIL, UNKNOWN)

HEALTHY, DEGRADED, FAILING = "healthy", "degraded", "failing"
# A node with no health data (down, or its source runs no checks) has no verdict.
NO_VERDICT = "unknown"
VERDICTS = (HEALTHY, DEGRADED, FAILING)
# Worst first; the number is the value of the rule metric node.health.
VERDICT_LEVEL = {HEALTHY: 0, DEGRADED: 1, FAILING: 2}

GPU, NODE, CLUSTER = "gpu", "node", "cluster"
# A finding's identity on the control host: (check, GPU index or None, status); its reason is its value.
FindingKey = tuple[str, int | None, str]


@dataclass(frozen=True)
class Check:
    id: str
    scope: str  # GPU, NODE or CLUSTER
    title: str
    rule: str  # when it warns or fails, in words
    source: str  # where the rule comes from
    warn_action: str
    fail_action: str


# The thresholds the rules below name; collectors/health_checks.py applies them.
BUSY_UTIL = 10  # %: a GPU at or above it is busy (idle GPUs downtrain PCIe and clocks by design)
PCIE_REPLAY_PER_MINUTE = 8
NVLINK_ERRORS_PER_SECOND = 1
RETIRED_PAGES_LIMIT = 60  # NVIDIA's dynamic page retirement guide: RMA at 60 retired pages
XID_WINDOW = 15 * 60  # s a GPU's last Xid stays a finding
IB_COUNTER_WINDOW = 5 * 60  # s an IB error counter's last rise stays a finding

CHECKS = (
    Check("pcie_link", GPU, "PCIe link",
          "fail: link width below the maximum; warn: generation below the maximum while the GPU is busy "
          "(idle GPUs downtrain to save power)",
          "nvmlDeviceGetCurr/MaxPcieLinkWidth and ...Generation (nvidia-smi -q: GPU Link Info); "
          "DCGM health watch PCIe",
          "Reseat or check the riser/switch if it persists under load; compare with lspci -vv LnkSta",
          "Drain the node and reseat the GPU or replace the riser: a narrow link cuts host bandwidth"),
    Check("pcie_replay", GPU, "PCIe replays",
          "warn: replay counter rising faster than 8 per minute",
          "nvmlDeviceGetPcieReplayCounter; dcgm-exporter DCGM_FI_PROF_PCIE_REPLAY_COUNTER, DCGM PCIe health watch",
          "Watch the link; schedule a reseat if the rate stays up",
          "Drain the node and reseat the GPU"),
    Check("row_remap", GPU, "Row remapping",
          "warn: a remap is pending (takes effect at the next GPU reset); fail: remapping failed",
          "nvmlDeviceGetRemappedRows (nvidia-smi -q: Remapped Rows); NVIDIA A100/H100 memory error "
          "management guide",
          "Reset the GPU (nvidia-smi -r) when it is idle so the pending remap takes effect",
          "Drain the node and replace the GPU: its memory can no longer be repaired"),
    Check("retired_pages", GPU, "Retired pages",
          "on GPUs without row remapping: warn: a retirement is pending; fail: 60 or more pages retired",
          "nvmlDeviceGetRetiredPages / GetRetiredPagesPendingStatus; NVIDIA dynamic page retirement guide",
          "Reboot the node when it is idle so the pending retirement takes effect",
          "Drain the node and request an RMA: the page retirement limit is near"),
    Check("ecc_mode", GPU, "ECC mode",
          "warn: ECC is off, or a mode change waits for a reboot",
          "nvmlDeviceGetEccMode (nvidia-smi -q: ECC Mode Current/Pending)",
          "Enable ECC (nvidia-smi -e 1) and reboot; training on non-ECC memory hides corruption",
          "Enable ECC (nvidia-smi -e 1) and reboot"),
    Check("ecc_uncorrected", GPU, "Uncorrectable ECC",
          "fail: volatile uncorrectable ECC errors since the driver loaded",
          "nvmlDeviceGetTotalEccErrors (volatile, uncorrected); DCGM memory health watch",
          "Reset the GPU and watch for a row remap",
          "Drain the node and reset the GPU; replace it if errors return"),
    Check("nvlink_state", GPU, "NVLink links",
          "fail: a link is down while other links of the GPU are up",
          "nvmlDeviceGetNvLinkState (nvidia-smi nvlink -s); Node Problem Detector GPU checks",
          "Check the NVLink bridge or NVSwitch fabric manager",
          "Drain the node: NCCL falls back to PCIe and every collective slows down; reseat or replace"),
    Check("nvlink_errors", GPU, "NVLink errors",
          "warn: CRC, replay or recovery errors rising faster than 1 per second over all links",
          "nvmlDeviceGetNvLinkErrorCounter (nvidia-smi nvlink -e); DCGM NVLink health watch",
          "Watch the link; check the fabric manager log",
          "Drain the node and reseat the NVLink bridge"),
    Check("xid", GPU, "Xid errors",
          "by NVIDIA's Xid catalogue (gpulse/xid.py): an Xid whose documented action is restarting the "
          "application (or none) warns, one that needs a GPU reset, a reboot or a repair (driver, memory, "
          "NVLink, bus, GSP) fails, for 15 minutes after the last one; an Xid not in the catalogue warns",
          "NVIDIA Xid Errors catalogue (docs.nvidia.com/deploy/xid-errors)",
          "Check the job's logs: this Xid is usually the application's",
          "Follow the Xid's action: drain the node, reset the GPU, reboot or replace"),
    Check("clocks", GPU, "Clock slowdown",
          "warn: hardware slowdown, thermal slowdown or power brake while the GPU is busy",
          "nvmlDeviceGetCurrentClocksEventReasons (nvidia-smi -q: Clocks Event Reasons); DCGM thermal/power watch",
          "Check cooling, fans and the PSU; the GPU runs below its clocks",
          "Check cooling and power delivery"),
    Check("config", GPU, "GPU configuration",
          "warn: persistence mode off, compute mode prohibited, or a MIG mode change pending",
          "nvmlDeviceGetPersistenceMode, GetComputeMode, GetMigMode (nvidia-smi -q)",
          "Set persistence mode (nvidia-smi -pm 1) / the compute mode; reset the GPU for a MIG change",
          "Fix the GPU configuration"),
    Check("gpu_tests", GPU, "GPU tests",
          "from the node's last `python -m workers.healthcheck --record` run (collector --gpu-test-record): "
          "fail: the GPU's device-memory, PCIe or bf16 matmul test below its floor for the GPU model; "
          "unknown: a test that could not run or has no published figure to judge by; until a later run "
          "passes it",
          "workers/gpu_checks.py against the GPU model's published figures, as nvbandwidth and a burn-in measure",
          "Run the health check again while the GPU is idle",
          "Drain the node and run `python -m workers.healthcheck` without --quick; replace the GPU if it fails "
          "again"),
    Check("gpu_count", NODE, "GPU count",
          "fail: fewer GPUs than expected (--expected-gpus, else the count first seen)",
          "nvmlDeviceGetCount; Node Problem Detector 'GPU missing'",
          "Check nvidia-smi and the kernel log",
          "Drain the node: a GPU fell off the bus or was not found at boot; reboot, then reseat or replace"),
    Check("ib_port", NODE, "InfiniBand/RoCE ports",
          "fail: a port not ACTIVE/LinkUp; warn: a rate below the node's other ports, or symbol errors, "
          "link downs or receive errors rising (for 5 minutes after the last rise)",
          "/sys/class/infiniband/*/ports/*/{state,phys_state,rate,counters}; Node Problem Detector IB checks",
          "Check the cable and the switch port; ibstat shows the same",
          "Drain the node: multi-node NCCL jobs cannot use this port; reseat or replace the cable"),
    Check("version_skew", CLUSTER, "Version skew",
          "warn: driver, CUDA version or GPU model differs from the majority of the node's group "
          "(collector --group: a partition or node pool; without one, the whole cluster)",
          "nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion; NCCL needs matching versions",
          "Upgrade the node to the fleet's driver and CUDA version",
          "Upgrade the node to the fleet's driver and CUDA version"),
    Check("fabric", CLUSTER, "Fabric bandwidth",
          "from the newest fabric sweep or bisection over the node (dashboard/benchmarks/diagnostics.py): "
          "fail: the median of its links below the sweep's flag fraction of the median of all links, or "
          "the bisection names it; warn: one of its links below that fraction while its median is not; "
          "until a later sweep over the node passes",
          "nccl-tests sendrecv / all_reduce busbw between node pairs, as operators read a node x node matrix",
          "Check the cable and both switch ports of the named link, then run a fabric sweep again",
          "Drain the node and check its NICs, cables and switch ports; a fabric sweep that passes clears it"),
)
CHECK_IDS = tuple(check.id for check in CHECKS)
BY_ID = {check.id: check for check in CHECKS}


def action(check_id: str, status: str) -> str:
    """The operator's next step for a finding; empty for pass and unknown."""
    check = BY_ID.get(check_id)
    if check is None or status not in (WARN, FAIL):
        return ""
    return check.fail_action if status == FAIL else check.warn_action


def verdict(statuses) -> str:
    """healthy, degraded (a warn) or failing (a fail) from the statuses of a node's findings."""
    worst = HEALTHY
    for status in statuses:
        if status == FAIL:
            return FAILING
        if status == WARN:
            worst = DEGRADED
    return worst
