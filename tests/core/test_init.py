"""Tests for the sandbox_kernel.core package: its public surface and its import rules."""

from __future__ import annotations

import ast
from pathlib import Path

import sandbox_kernel.core as core

CORE_DIR = Path(core.__file__).parent


def test_public_surface_is_pinned() -> None:
    assert sorted(core.__all__) == [
        "ExecutionPolicy",
        "FieldError",
        "GuestImageCorrupt",
        "GuestImageNotFound",
        "LimitKind",
        "PolicyValidationError",
        "RuntimeType",
        "SandboxAbandoned",
        "SandboxBusyError",
        "SandboxError",
        "SandboxExecutionError",
        "SandboxLogger",
        "SandboxResult",
        "SecurityEventKind",
        "load_policy",
    ]


def test_every_public_name_resolves() -> None:
    for name in core.__all__:
        assert getattr(core, name).__module__.startswith("sandbox_kernel.core."), name


def _imported_modules(source: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{source.name}: use absolute imports"
            modules.add(node.module or "")
    return modules


def test_core_imports_nothing_above_it_and_no_wasmtime() -> None:
    sources = sorted(CORE_DIR.glob("*.py"))
    assert len(sources) >= 5
    for source in sources:
        for module in _imported_modules(source):
            top = module.split(".")[0]
            assert top != "wasmtime", f"{source.name} imports {module}"
            if top == "sandbox_kernel":  # _lazy: the package's import-on-first-use helper
                below = module.startswith("sandbox_kernel.core") or module == "sandbox_kernel._lazy"
                assert below, f"{source.name} imports {module}"


def test_every_module_opens_with_a_docstring_naming_its_import_rule() -> None:
    for source in sorted(CORE_DIR.glob("*.py")):
        docstring = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8")))
        assert docstring, source.name
        assert "Must not import" in docstring, source.name
