"""What failed: a health check's id (gpulse/health.py) as the component an incident counts against.

The components follow the classes fleet reports use (Meta's Llama 3 paper:
faulty GPU, GPU memory, network, software, host). An Xid counts by its
catalogue class (gpulse/xid.py), read from the code in the finding's reason
and classified here, on the trusted side.
"""

import re

from gpulse import xid

GPU, GPU_MEMORY, NVLINK, PCIE, NETWORK = "gpu", "gpu_memory", "nvlink", "pcie", "network"
THERMAL, POWER, DRIVER, SOFTWARE, NODE_DOWN = "thermal", "power", "driver", "software", "node_down"
LABELS = {
    GPU: "GPU", GPU_MEMORY: "GPU memory", NVLINK: "NVLink", PCIE: "PCIe", NETWORK: "InfiniBand/network",
    THERMAL: "Thermal", POWER: "Power", DRIVER: "Driver", SOFTWARE: "Software", NODE_DOWN: "Node down",
}

BY_CHECK = {
    "pcie_link": PCIE, "pcie_replay": PCIE,
    "row_remap": GPU_MEMORY, "retired_pages": GPU_MEMORY, "ecc_mode": GPU_MEMORY, "ecc_uncorrected": GPU_MEMORY,
    "nvlink_state": NVLINK, "nvlink_errors": NVLINK,
    "gpu_count": GPU,  # a GPU fell off the bus or was not found at boot
    "gpu_tests": GPU,  # its memory, PCIe or matmul test fell below the model's floor
    "ib_port": NETWORK, "fabric": NETWORK,
    "config": DRIVER, "version_skew": DRIVER,
}
BY_XID_KIND = {
    xid.APPLICATION: SOFTWARE, xid.DRIVER: DRIVER, xid.MEMORY: GPU_MEMORY, xid.NVLINK: NVLINK,
    xid.BUS: GPU,  # Xid 79: the GPU fell off the bus
    xid.GSP: GPU, xid.HARDWARE: GPU, xid.UNKNOWN_KIND: GPU,
}
XID_CODE = re.compile(r"\bXid (\d+)")


def component(check: str, reason: str) -> str:
    """The component a failed finding of ``check`` with ``reason`` counts against."""
    if check == "xid":
        match = XID_CODE.search(reason)
        return BY_XID_KIND[xid.classify(int(match.group(1))).kind] if match else GPU
    if check == "clocks":  # "hardware slowdown, power brake while busy": power where it names power
        return POWER if "power" in reason.lower() else THERMAL
    return BY_CHECK.get(check, GPU)


def label(name: str) -> str:
    """A component's name for people; an imported one as written."""
    return LABELS.get(name, name)
