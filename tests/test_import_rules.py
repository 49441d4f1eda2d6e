"""Which package may import which: read from the source, so a violation fails before it runs."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


def file_imports(path: Path) -> set[str]:
    return imported_modules(path.relative_to(ROOT).parts[:-1], path.read_text())


def modules_under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in paths
        for name in file_imports(path)
        if any(name == prefix or name.startswith(prefix + ".") for prefix in forbidden)
    )


def test_the_live_app_knows_neither_alerts_nor_benchmarks():
    # Ingest gets the alert evaluator and the cluster summary by dotted path from settings.
    paths = modules_under("dashboard/live")
    assert paths
    assert offending(paths, ("dashboard.alerts", "dashboard.benchmarks")) == []


@pytest.mark.parametrize("folder", ["collectors", "workers", "dashboard", "gpulse"])
def test_production_code_imports_no_devtools(folder):
    assert offending(modules_under(folder), ("devtools",)) == []


@pytest.mark.parametrize("folder", ["collectors", "workers", "gpulse"])
def test_the_collector_workers_and_contract_never_import_django_or_the_dashboard(folder):
    assert offending(modules_under(folder), ("django", "dashboard")) == []


def test_the_rules_see_relative_and_nested_imports():
    source = "from ..alerts import evaluate\nfrom . import cluster\n\ndef f():\n    import devtools.x\n"
    names = imported_modules(("dashboard", "live"), source)
    assert {"dashboard.alerts.evaluate", "dashboard.live.cluster", "devtools.x"} <= names
