"""The frame format is written twice: dashboard/live/frames.py builds frames, static/gpulse/frames.js reads
them. Both must name the same row fields in the same order and give each flag the same bit (issue 33)."""

import json
import re
from pathlib import Path

import pytest

from dashboard.live import frames
from gpulse.schema import MAX_MIG_INSTANCES

FRAMES_JS = Path(__file__).resolve().parent.parent / "static/gpulse/frames.js"


def _declaration(source: str, name: str, opening: str, closing: str) -> str:
    """The text between the brackets of ``const <name> = <opening>...<closing>;`` in ``source``."""
    found = re.search(rf"\bconst\s+{name}\s*=\s*{re.escape(opening)}(.*?){re.escape(closing)}\s*;", source, re.S)
    if found is None:
        raise ValueError(f"frames.js declares no `const {name} = {opening}...{closing};`")
    return re.sub(r"//[^\n]*", "", found.group(1))  # comments say why, and may hold anything


def js_fields(source: str, name: str = "FIELDS") -> tuple[str, ...]:
    """FIELDS (or META_FIELDS, MIG_FIELDS) of frames.js: a list of quoted names."""
    return tuple(json.loads(f"[{_declaration(source, name, '[', ']').rstrip().rstrip(',')}]"))


def js_flags(source: str) -> dict[str, int]:
    """FLAG of frames.js: NAME: bit pairs."""
    body = _declaration(source, "FLAG", "{", "}")
    entries = [entry.strip() for entry in body.split(",") if entry.strip()]
    flags = {}
    for entry in entries:
        pair = re.fullmatch(r"([A-Z_][A-Z0-9_]*)\s*:\s*(\d+)", entry)
        if pair is None:
            raise ValueError(f"frames.js FLAG has an entry that is not NAME: bit: {entry!r}")
        flags[pair[1]] = int(pair[2])
    return flags


def python_flags() -> dict[str, int]:
    """frames.py's FLAG_<NAME> constants, as frames.js names them (FLAG.<NAME>)."""
    return {name.removeprefix("FLAG_"): value for name, value in vars(frames).items() if name.startswith("FLAG_")}


def differences(source: str) -> list[str]:
    """What frames.js (``source``) says otherwise than frames.py; empty when they agree."""
    found = []
    for name in ("FIELDS", "META_FIELDS", "MIG_FIELDS"):
        ours_fields, theirs_fields = getattr(frames, name), js_fields(source, name)
        if theirs_fields != tuple(ours_fields):
            found.append(f"{name}: frames.py {list(ours_fields)}, frames.js {list(theirs_fields)}")
    ours, theirs = python_flags(), js_flags(source)
    for name in sorted(ours.keys() | theirs.keys()):
        if ours.get(name) != theirs.get(name):
            found.append(f"flag {name}: frames.py FLAG_{name} = {ours.get(name)}, frames.js FLAG.{name} = "
                         f"{theirs.get(name)}")
    return found


def test_frames_js_reads_the_format_frames_py_writes():
    assert differences(FRAMES_JS.read_text()) == []


def test_each_flag_is_its_own_bit():
    bits = list(python_flags().values())
    assert len(bits) == len(set(bits)) and all(bit > 0 and bit & (bit - 1) == 0 for bit in bits), bits


# The comparison itself must fail: frames.js as it is, changed the ways the two files drift apart.
@pytest.mark.parametrize(
    ("change", "difference"),
    [
        (('"temp", "power"', '"power", "temp"'), "FIELDS: frames.py"),
        (('"sm_clock", ', ""), "FIELDS: frames.py"),
        (('"mem_total", "power_limit"', '"power_limit", "mem_total"'), "META_FIELDS: frames.py"),
        (('"profile", "slices"', '"slices", "profile"'), "MIG_FIELDS: frames.py"),
        (("IDLE: 64,", "IDLE: 128,"), "flag IDLE: frames.py FLAG_IDLE = 64, frames.js FLAG.IDLE = 128"),
        (("ECC: 8,", ""), "flag ECC: frames.py FLAG_ECC = 8, frames.js FLAG.ECC = None"),
        (("LOST: 1,", "LOST: 1,\n    DRAINED: 128,"), "flag DRAINED: frames.py FLAG_DRAINED = None"),
    ],
)
def test_a_drifted_frames_js_is_caught(change, difference):
    source = FRAMES_JS.read_text()
    old, new = change
    assert old in source, f"frames.js no longer has {old!r}: update this case"
    found = differences(source.replace(old, new, 1))
    assert any(line.startswith(difference) for line in found), found


def test_a_frames_js_that_declares_the_format_otherwise_is_refused():
    source = FRAMES_JS.read_text()
    with pytest.raises(ValueError, match="declares no `const FIELDS"):
        differences(source.replace("const FIELDS", "let FIELDS"))
    with pytest.raises(ValueError, match="not NAME: bit: 'LOST: 1 << 0'"):
        differences(source.replace("LOST: 1,", "LOST: 1 << 0,"))


def test_frames_js_reads_at_most_the_instances_the_contract_allows():
    found = re.search(r"\bconst\s+MAX_MIG_INSTANCES\s*=\s*(\d+)\s*;", FRAMES_JS.read_text())
    assert found is not None and int(found[1]) == MAX_MIG_INSTANCES
