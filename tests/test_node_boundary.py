"""What a GPU node runs stays apart: no Django, no developer tools, only requirements-node.txt.

A GPU node installs requirements-node.txt alone (the Dockerfile's node target),
so a Django import in the collector or the node worker would only fail there.
These tests make it fail here.
"""

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_PACKAGES = ("collectors", "workers", "gpulse")
PRODUCTION_PACKAGES = (*NODE_PACKAGES, "dashboard")
CONTROL_ONLY = {"django", "channels", "dashboard", "devtools"}

# The start of a script for a fresh interpreter: refuses (as if not installed) and
# records every import of a control-host-only package, with the module that asked for it.
REFUSE_CONTROL_HOST = """
import json, sys

REFUSED = set(sys.argv[1].split(","))
attempts = []

class NotOnAGpuNode:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in REFUSED:
            return None
        frame = sys._getframe(1)
        while frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
            frame = frame.f_back
        attempts.append([name, frame.f_globals.get("__name__")])
        raise ImportError(f"{name} is not installed on a GPU node")

sys.meta_path.insert(0, NotOnAGpuNode())
"""

NODE_PROCESS = REFUSE_CONTROL_HOST + """
import collectors.cli, collectors.dcgm, collectors.nvml, collectors.probe
import workers.node_worker
from workers.celery_app import app

assert "gpulse.benchmarks.run_node" in app.tasks  # the node worker's task is registered
code = collectors.cli.main(["--source", "simulated", "--nodes", "1", "--gpus-per-node", "2", "--once", "--stdout"])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in REFUSED)
print(json.dumps({"code": code, "attempts": attempts, "loaded": loaded}))
"""


def test_the_collector_and_the_node_worker_run_without_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", NODE_PROCESS, ",".join(sorted(CONTROL_ONLY))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    assert report["code"] == 0
    assert json.loads(lines[0])["gpus"]  # the sample itself came out
    ours = [(name, importer) for name, importer in report["attempts"]
            if (importer or "").split(".")[0] in (*NODE_PACKAGES, "__main__")]
    assert ours == [], f"node code imports control-host packages: {ours}"
    assert report["loaded"] == []


# The developer tools run on GPU nodes, with requirements-node.txt alone.
NODE_TOOLS_PROCESS = REFUSE_CONTROL_HOST + """
import devtools.gpu_check, devtools.node_worker_check

loaded = sorted(m for m in sys.modules if m.split(".")[0] in REFUSED)
print(json.dumps({"attempts": attempts, "loaded": loaded}))
"""


def test_the_gpu_node_tools_import_no_control_host_package():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    refused = ",".join(sorted(CONTROL_ONLY - {"devtools"}))
    done = subprocess.run([sys.executable, "-c", NODE_TOOLS_PROCESS, refused], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    ours = [(name, importer) for name, importer in report["attempts"]
            if (importer or "").split(".")[0] in (*NODE_PACKAGES, "devtools", "__main__")]
    assert ours == [], f"a GPU node's tool imports control-host packages: {ours}"
    assert report["loaded"] == []


def imported_packages(package: str) -> dict[str, set[str]]:
    """Map each module file under ``package`` to the top-level packages it imports, lazy imports included."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_no_production_module_imports_the_developer_tools():
    offenders = [path for package in PRODUCTION_PACKAGES
                 for path, names in imported_packages(package).items() if "devtools" in names]
    assert offenders == []


def test_node_code_never_names_a_control_host_package():
    offenders = {path: names & CONTROL_ONLY for package in NODE_PACKAGES
                 for path, names in imported_packages(package).items() if names & CONTROL_ONLY}
    assert offenders == {}


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(canonical(re.split(r"[\[=<>~!; ]", line)[0]))
    return names


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_requirements_node_names_every_package_node_code_imports():
    providers = importlib.metadata.packages_distributions()
    third_party = {name for package in NODE_PACKAGES for names in imported_packages(package).values()
                   for name in names
                   if name not in sys.stdlib_module_names and name not in NODE_PACKAGES and name != "__future__"}
    needed = {canonical(dist) for name in third_party for dist in providers[name]}
    node = requirement_names(ROOT / "requirements-node.txt")
    assert needed <= node, needed - node
    assert "django" not in node
    full = (ROOT / "requirements.txt").read_text()
    assert "-r requirements-node.txt" in full.splitlines()
