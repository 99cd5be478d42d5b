"""The runner's place among the layers: it uses repl/ (and so the sandbox) but knows nothing of
Jupyter or wasmtime; its guest modules import only the standard library and never the host."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import sandbox_kernel

PACKAGE = Path(sandbox_kernel.__file__).parent
RUNNER = sorted((PACKAGE / "runner").glob("*.py"))
GUEST_TABLE_MODULES = [PACKAGE / "guest" / "tables.py", PACKAGE / "guest" / "sql.py"]
FORBIDDEN_IN_RUNNER = ("wasmtime", "ipykernel", "jupyter_client", "sandbox_kernel.kernel")


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", RUNNER, ids=lambda p: p.name)
def test_the_runner_knows_nothing_of_jupyter_or_wasmtime(path: Path) -> None:
    bad = [
        name
        for name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_RUNNER)
    ]
    assert bad == []


@pytest.mark.parametrize("path", GUEST_TABLE_MODULES, ids=lambda p: p.name)
def test_guest_modules_import_only_the_standard_library(path: Path) -> None:
    top = {name.split(".")[0] for name in _imports(path, top_level_only=True)}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top
    assert not any(name.startswith("sandbox_kernel") for name in _imports(path))
