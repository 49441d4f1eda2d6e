"""Command-line value parsers shared by the collector and the developer tools.

argparse calls them with the flag's text; a bad value becomes argparse's usage
error naming the flag and the reason. Nothing here imports Django.
"""

import argparse
from pathlib import Path

from gpulse.schema import NODE_NAME


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def folder(text: str) -> Path:
    """An existing directory: a mistyped mount point is a usage error, not a node that reads as empty."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path


def group_name(text: str) -> str:
    """A node group (partition, node pool) has a node name's characters: it is shown on the pages and in
    reasons. Unlike a node, it may be called "all" or "default": it never reaches scontrol."""
    if NODE_NAME.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 1-63 letters, digits, '.', '-' or '_' (not starting with '.' or '-')")
    return text
