"""The layers import downward only (docs/FORMAT.md's layers, STYLE.md): the format, storage,
metadata, reader, writer and compaction packages never reach up to the table, the driver or
an adapter, not even inside a function or for type checking, and no two modules import each
other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "carbonlite"
LOWER = ("format", "storage", "metadata", "reader", "writer", "compaction")
UPPER = (
    "carbonlite.table",
    "carbonlite.create",
    "carbonlite.driver",
    "carbonlite.spark",
    "carbonlite.cli",
    "carbonlite.serve",
    "carbonlite.ingest",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("carbonlite")}


MODULES = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


@pytest.mark.parametrize("package", LOWER)
def test_lower_layers_never_import_upward(package: str) -> None:
    upward = {
        (module, target)
        for module, targets in MODULES.items()
        if module.startswith(f"carbonlite.{package}.")
        for target in targets
        if target.startswith(UPPER) or target == "carbonlite"
    }
    assert not upward, sorted(upward)


def test_no_two_modules_import_each_other() -> None:
    pairs = {
        tuple(sorted((a, b)))
        for a, targets in MODULES.items()
        for b in targets
        if b in MODULES and b != a and a in MODULES[b] and not _package_of(a, b)
    }
    assert not pairs, sorted(pairs)


def _package_of(a: str, b: str) -> bool:
    """A package's ``__init__`` re-exporting its own modules is not a cycle."""
    return a.startswith(f"{b}.") or b.startswith(f"{a}.")


def test_the_checks_see_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from carbonlite.table import Table\n", encoding="utf-8")
    assert "carbonlite.table" in imports(module)
