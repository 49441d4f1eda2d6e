"""A module as it was at an earlier commit, loaded from git: benchmarks compare against it without a copy of old
code."""

import subprocess
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_at(commit: str, path: str) -> types.ModuleType:
    """The Python file ``path`` (relative to the repository) as of ``commit``, run as a module of its own."""
    source = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    module = types.ModuleType(f"{Path(path).stem}_at_{commit}")
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module
