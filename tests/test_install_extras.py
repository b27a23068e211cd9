"""What the README's install commands install (issue 38 §3): its first command is enough for
its Python example, and the pandas the extras allow is one PySpark 4.3 supports without its
warning (the dev extras installed pandas 3, and every Spark session printed "PySpark does not
yet fully support pandas >= 3.0.0").

Read from pyproject.toml and README.md as they are; PySpark's own check judges the versions.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import warnings

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.support import REPO

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML (tomllib)")

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
README = (REPO / "README.md").read_text()


def requirements(extras: list[str]) -> list[Requirement]:
    """Every requirement ``pip install ".[extras]"`` brings in: the dependencies and those of
    each extra, following the extras that name carbonlite itself."""
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in PROJECT["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == "carbonlite":
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def first_install_extras() -> list[str]:
    """The extras of the README's first command (``pip install ".[spark]" && ...``)."""
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block is not None, "README.md has no bash block"
    install = re.search(r"pip install \"?\.\[([a-z,]+)\]", block.group(1))
    assert install is not None, block.group(1)
    return install.group(1).split(",")


def python_example_imports() -> set[str]:
    """The top-level modules the README's Python example (the first block of "## Python")
    imports."""
    section = README.split("\n## Python\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    modules = set()
    for node in ast.walk(ast.parse(code.group(1))):
        if isinstance(node, ast.Import):
            modules.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_the_first_command_installs_what_the_python_example_imports() -> None:
    installed = {canonicalize_name(r.name) for r in requirements(first_install_extras())}
    distributions = importlib.metadata.packages_distributions()
    needed = {}
    for module in python_example_imports() - set(sys.stdlib_module_names) - {"carbonlite"}:
        needed[module] = {canonicalize_name(d) for d in distributions[module]}
    assert "pandas" in needed, "the check reads the example's imports"
    missing = {m: d for m, d in needed.items() if not d & installed}
    assert not missing, f"README's first command does not install {missing}"


def pyspark_accepts(version: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether PySpark's own check takes pandas ``version`` without an error or a warning."""
    pandas = pytest.importorskip("pandas")
    utils = pytest.importorskip("pyspark.sql.pandas.utils")
    with monkeypatch.context() as patched:
        patched.setattr(pandas, "__version__", version)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                utils.require_minimum_pandas_version()
            except (Exception, FutureWarning):
                return False
    return True


def test_the_extras_pin_pandas_to_what_pyspark_supports(monkeypatch: pytest.MonkeyPatch) -> None:
    for extras in (["spark"], ["dev"]):
        pins = [r.specifier for r in requirements(extras) if r.name == "pandas"]
        allowed = SpecifierSet(",".join(str(p) for p in pins if str(p)))
        candidates = ["2.1.4", "2.2.0", "2.2.3", "2.3.3", "3.0.0", "3.0.2", "3.1.1"]
        assert any(allowed.contains(v) for v in candidates), (extras, allowed)
        for version in candidates:
            if allowed.contains(version):
                assert pyspark_accepts(version, monkeypatch), (extras, allowed, version)
    assert not pyspark_accepts("3.0.0", monkeypatch), "PySpark's check must judge something"
    assert not pyspark_accepts("2.1.4", monkeypatch)
