"""The simulated fleet's faults: one definition for the collector and the web.

A fault applies to one GPU ("<node>/<gpu>") or to every GPU of a node
("<node>"); collectors/simulated.py says what each one does to the readings.
The collector reads them from the Redis hash ``Keys().simulator_faults`` and
the dashboard's simulator app writes them there.
"""

FAULTS = ("hot", "xid", "ecc", "lost", "dead", "pcie_degraded", "row_remap_pending", "nvlink_down", "gpu_missing",
          "ib_down", "driver_skew", "clear")
# Faults of a whole node (it stops, or a node reading changes): the simulator page refuses them on one GPU.
NODE_FAULTS = frozenset({"dead", "ib_down", "driver_skew"})
# "xid" alone: a double-bit ECC error.
DEFAULT_XID = 48
# Every accepted spelling, for help texts and error messages.
SPELLINGS = ", ".join(f"{name}, xid:<code>" if name == "xid" else name for name in FAULTS)


def parse_target(text: str) -> tuple[str, int | None]:
    """Return (node, gpu index or None) for "<node>" or "<node>/<gpu>"."""
    node, sep, gpu = text.strip().partition("/")
    if not node:
        raise ValueError(f"fault target {text!r} has no node name")
    if not sep:
        return node, None
    if not gpu.isdigit():
        raise ValueError(f"fault target {text!r}: GPU must be an index like {node}/0")
    return node, int(gpu)


def parse_fault(text: str) -> tuple[str, int]:
    """Return (fault name, Xid code or 0) for a fault name like "hot" or "xid:79"."""
    name, sep, code = text.strip().lower().partition(":")
    if name not in FAULTS:
        raise ValueError(f"unknown fault {text!r} (known: {SPELLINGS})")
    if name != "xid":
        if sep:
            raise ValueError(f"fault {name!r} takes no code")
        return name, 0
    if not sep:
        return name, DEFAULT_XID
    if not code.isdigit() or int(code) == 0:
        raise ValueError(f"fault {text!r}: Xid code must be a positive number")
    return name, int(code)
