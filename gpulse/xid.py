"""NVIDIA's Xid catalogue: what each Xid is, how bad it is, and what to do.

Source: NVIDIA's Xid catalogue for Ampere and newer GPUs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its
"Resolution Bucket (Immediate Action)" column). Each row below keeps NVIDIA's
description and turns the immediate action into words an operator can follow.
Codes the catalogue lists as "Unused" on current GPUs are left out.

Severity follows the immediate action, not the kind: an Xid whose action is to
restart the application, or nothing at all (IGNORE), warns, because the GPU
itself is fine; one that needs a GPU reset, a reboot or a repair fails. So Xid
94 (a contained memory error: restart the application) warns although it is a
memory Xid, and Xid 48 (a double-bit error) fails.
"""

from dataclasses import dataclass

from gpulse.health import FAIL, WARN

APPLICATION, DRIVER, MEMORY, NVLINK, BUS, GSP, HARDWARE = (
    "application", "driver", "memory", "nvlink", "bus", "gsp", "hardware")
KINDS = (APPLICATION, DRIVER, MEMORY, NVLINK, BUS, GSP, HARDWARE)


@dataclass(frozen=True)
class XidInfo:
    code: int
    kind: str  # one of KINDS, or "unknown" for a code not in the catalogue
    severity: str  # WARN or FAIL
    description: str  # NVIDIA's
    action: str  # NVIDIA's immediate action, in words


# NVIDIA's immediate actions ("resolution buckets"), in words.
RESTART_APP = "Restart the application"
CHECK_APP = "Restart the application and check it for bugs (compute-sanitizer)"
IGNORE = "No action needed now; contact NVIDIA support if it recurs"
RESET_GPU = "Drain the node and reset the GPU (nvidia-smi -r)"
RESTART_BM = "Drain the node and reboot it; reseat or replace the GPU if it recurs"
WORKFLOW_XID_48 = ("Drain the node and reset the GPU; check its row remapping (nvidia-smi -q -d ROW_REMAPPER) "
                   "and replace it if remapping failed")
WORKFLOW_XID_45 = "Follow the Xid reported before it; alone, restart the fabric manager"
WORKFLOW_NVLINK = ("Drain the node and reset the GPU; check the links (nvidia-smi nvlink -e) and the fabric manager; "
                   "contact NVIDIA support if it persists")
CHECK_MECHANICALS = "Drain the node and connect the GPU's auxiliary power cable"

_WARN_ACTIONS = frozenset({RESTART_APP, CHECK_APP, IGNORE, WORKFLOW_XID_45})

# code: (kind, NVIDIA's description, immediate action)
_CATALOGUE = {
    8: (APPLICATION, "GPU stopped processing", RESTART_APP),
    11: (APPLICATION, "Invalid or corrupted push buffer stream", CHECK_APP),
    13: (APPLICATION, "Graphics Engine Exception", CHECK_APP),
    25: (APPLICATION, "Invalid or illegal push buffer stream", CHECK_APP),
    31: (APPLICATION, "GPU memory page fault", CHECK_APP),
    32: (APPLICATION, "Invalid or corrupted push buffer stream", CHECK_APP),
    37: (DRIVER, "Driver firmware error", IGNORE),
    38: (DRIVER, "Driver firmware error", IGNORE),
    39: (APPLICATION, "Copy Engine Exception", RESTART_APP),
    40: (APPLICATION, "Copy Engine Exception", RESTART_APP),
    41: (APPLICATION, "Copy Engine Exception", RESTART_APP),
    43: (APPLICATION, "GPU stopped processing", IGNORE),
    44: (DRIVER, "Graphics Engine fault during context switch", IGNORE),
    45: (APPLICATION, "Preemptive cleanup, due to previous errors", WORKFLOW_XID_45),
    46: (HARDWARE, "GPU stopped processing", RESET_GPU),
    48: (MEMORY, "Double Bit ECC Error", WORKFLOW_XID_48),
    54: (HARDWARE, "Auxiliary power is not connected to the GPU board", CHECK_MECHANICALS),
    62: (HARDWARE, "Internal micro-controller halt", RESET_GPU),
    63: (MEMORY, "GPU memory remapping event", IGNORE),
    64: (MEMORY, "GPU memory remapping failure", RESET_GPU),
    66: (DRIVER, "Illegal access by driver", IGNORE),
    67: (DRIVER, "Illegal access by driver", IGNORE),
    68: (APPLICATION, "NVDEC0 Exception", RESTART_APP),
    69: (APPLICATION, "Graphics Engine class error", CHECK_APP),
    74: (NVLINK, "NVLink Error", WORKFLOW_NVLINK),
    79: (BUS, "GPU has fallen off the bus", RESTART_BM),
    80: (APPLICATION, "Corrupted data sent to GPU", CHECK_APP),
    92: (MEMORY, "High single-bit ECC error rate", IGNORE),
    93: (HARDWARE, "Non-fatal violation of provisioned InfoROM wear limit", IGNORE),
    94: (MEMORY, "Contained memory error", RESTART_APP),
    95: (MEMORY, "Uncontained memory error", RESET_GPU),
    109: (DRIVER, "Context Switch Timeout Error", RESET_GPU),
    110: (HARDWARE, "Security Fault Error", RESET_GPU),
    119: (GSP, "GSP RPC Timeout", RESET_GPU),
    120: (GSP, "GSP Error", RESET_GPU),
    121: (BUS, "C2C Error", IGNORE),
    136: (NVLINK, "Link Training Failed", RESET_GPU),
    137: (NVLINK, "NVLink Privilege Error", IGNORE),
    140: (MEMORY, "ECC Unrecovered Error", RESET_GPU),
    143: (HARDWARE, "GPU Initialization Error", RESET_GPU),
    **{code: (NVLINK, f"NVLink5 {unit} Error", WORKFLOW_NVLINK) for code, unit in
       zip(range(144, 151), ("SAW", "RLW", "TLW", "TREX", "NVLPW_CTRL", "NETIR", "MSE"), strict=True)},
    155: (NVLINK, "NVLink SW Defined Error", RESET_GPU),
    156: (MEMORY, "Resource Retirement Event", RESET_GPU),
    157: (MEMORY, "Resource Retirement Failure", IGNORE),
    158: (HARDWARE, "GPU Fatal Timeout", RESET_GPU),
}

XIDS = {code: XidInfo(code, kind, WARN if action in _WARN_ACTIONS else FAIL, description, action)
        for code, (kind, description, action) in _CATALOGUE.items()}

# A code not in the table (a newer driver's, or one NVIDIA lists as unused) warns
# rather than fails: failing marks the node for draining, and gpulse cannot tell
# whether an unknown Xid is an informational event (as 162-165, power smoothing
# notices, are) or a fatal one. A warning puts it in front of a person, who can
# look the code up, without taking the node out of the job.
UNKNOWN_KIND = "unknown"
UNKNOWN_DESCRIPTION = "not in gpulse's catalogue"
UNKNOWN_ACTION = "Look the code up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)"


def classify(code: int) -> XidInfo:
    """Return what Xid ``code`` is and what to do about it; an unknown code warns."""
    info = XIDS.get(code)
    if info is None:
        return XidInfo(code, UNKNOWN_KIND, WARN, UNKNOWN_DESCRIPTION, UNKNOWN_ACTION)
    return info
