"""Which package may import which (docs/ARCHITECTURE.md): read from the source with `ast`, lazy imports
included, so a violation fails before it runs.

  collectors  import gpulse only (of gpulse's packages): a node's collector is the contract and itself
  workers     the node runtime: nothing of the dashboard
  gpulse      the contract both sides share: nothing of workers, the dashboard or the collectors
  dashboard   workers in the few files listed below only; no two of its apps import each other
"""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = ("collectors", "dashboard", "devtools", "gpulse", "workers")

# The dashboard files that may import workers: a management command that runs a benchmark in-process.
DASHBOARD_IMPORTS_WORKERS = {"dashboard/benchmarks/management/commands/collective.py"}


def imported_modules(package: tuple[str, ...], source: str) -> set[str]:
    """Every module the source imports, relative imports resolved against its package."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def file_imports(path: Path, root: Path = ROOT) -> set[str]:
    return imported_modules(path.relative_to(root).parts[:-1], path.read_text())


def modules_under(folder: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / folder).rglob("*.py"))


def within(name: str, prefixes) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def offending(paths: list[Path], forbidden, root: Path = ROOT) -> list[str]:
    return sorted(
        f"{path.relative_to(root)} imports {name}"
        for path in paths
        for name in file_imports(path, root)
        if within(name, forbidden)
    )


def files_importing(folder: str, package: str, root: Path = ROOT) -> set[str]:
    return {str(path.relative_to(root)) for path in modules_under(folder, root)
            if any(within(name, (package,)) for name in file_imports(path, root))}


def app_of(module: str) -> str | None:
    """The dashboard app a module belongs to; None for dashboard/*.py, the project itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "dashboard" and len(parts) > 2 else None


def app_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """dashboard app -> the other dashboard apps its modules import. Migrations are left out: each
    keeps what it imported when it was written."""
    graph = defaultdict(set)
    for path in modules_under("dashboard", root):
        parts = path.relative_to(root).with_suffix("").parts
        app = app_of(".".join(parts))
        if app is None or "migrations" in parts:
            continue
        for name in file_imports(path, root):
            other = app_of(name)
            if other is not None and other != app and (root / "dashboard" / other).is_dir():
                graph[app].add(other)
    return graph


def two_way(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    return {frozenset((app, other)) for app, others in graph.items() for other in others
            if app in graph.get(other, ())}


def test_collectors_import_only_the_contract():
    forbidden = [package for package in FIRST_PARTY if package not in ("collectors", "gpulse")]
    assert offending(modules_under("collectors"), forbidden) == []


def test_the_contract_imports_neither_side():
    assert offending(modules_under("gpulse"), ("workers", "dashboard", "collectors")) == []


@pytest.mark.parametrize("folder", ["collectors", "workers", "gpulse"])
def test_node_side_code_never_imports_django_or_the_dashboard(folder):
    assert offending(modules_under(folder), ("django", "dashboard")) == []


def test_the_dashboard_imports_workers_only_where_listed():
    assert len(DASHBOARD_IMPORTS_WORKERS) <= 3
    assert files_importing("dashboard", "workers") <= DASHBOARD_IMPORTS_WORKERS


def test_no_two_dashboard_apps_import_each_other():
    assert two_way(app_graph()) == set()


def test_the_ingest_core_imports_no_other_app():
    # Ingest gets its stages (alerts, health, probes, ...) by dotted path from settings; the pages that
    # show what it writes (nodes, healthz) read it, never the reverse.
    assert modules_under("dashboard/live")
    assert app_graph().get("live", set()) == set()


def test_the_node_pages_read_the_core_and_no_feature_app():
    # The node history reads the long-term store through a setting's dotted path (GPULSE_HISTORY_STORE_READER);
    # accounts is the login its websockets check.
    assert app_graph()["nodes"] <= {"live", "accounts"}


@pytest.mark.parametrize("folder", ["collectors", "workers", "dashboard", "gpulse"])
def test_production_code_imports_no_devtools(folder):
    assert offending(modules_under(folder), ("devtools",)) == []


def test_the_rules_see_relative_and_nested_imports():
    source = "from ..alerts import evaluate\nfrom . import cluster\n\ndef f():\n    import devtools.x\n"
    names = imported_modules(("dashboard", "live"), source)
    assert {"dashboard.alerts.evaluate", "dashboard.live.cluster", "devtools.x"} <= names


def write(root: Path, path: str, source: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(source)


def test_the_checks_find_each_kind_of_violation_in_a_tree(tmp_path):
    write(tmp_path, "collectors/probe.py", "def probe():\n    from workers.launcher import run_node\n")
    write(tmp_path, "collectors/cli.py", "from gpulse.keys import Keys\nimport redis\n")
    write(tmp_path, "gpulse/keys.py", "from dashboard.settings import PREFIX\n")
    write(tmp_path, "dashboard/settings.py", "from workers.sweep_spec import LIMIT\n")
    write(tmp_path, "dashboard/alerts/evaluate.py", "from dashboard.scheduler import hooks\n")
    write(tmp_path, "dashboard/scheduler/hooks.py", "def enqueue():\n    from ..alerts.models import Rule\n")
    write(tmp_path, "dashboard/scheduler/migrations/0001_initial.py", "import dashboard.usage.models\n")
    write(tmp_path, "dashboard/usage/views.py", "from dashboard.scheduler.models import DrainRecord\n")
    write(tmp_path, "dashboard/usage/models.py", "from dashboard.summary import totals\n")

    assert offending(modules_under("collectors", tmp_path), ("workers",), tmp_path) == [
        "collectors/probe.py imports workers.launcher", "collectors/probe.py imports workers.launcher.run_node"]
    assert offending(modules_under("gpulse", tmp_path), ("dashboard",), tmp_path)
    assert files_importing("dashboard", "workers", tmp_path) == {"dashboard/settings.py"}
    graph = app_graph(tmp_path)
    # The migration's import and the project module (dashboard/summary.py) make no edge.
    assert graph == {"alerts": {"scheduler"}, "scheduler": {"alerts"}, "usage": {"scheduler"}}
    assert two_way(graph) == {frozenset(("alerts", "scheduler"))}
