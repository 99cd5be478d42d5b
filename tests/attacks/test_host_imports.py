"""Attacks on the host processes' own code: a module planted where a host process starts.

Jupyter starts a kernel in the notebook's folder, and `python -m` puts the working folder first
on `sys.path`: a `zmq.py` beside a notebook (a cloned course's, or one a cell wrote into a
workspace that is that folder) would run on the host at the kernel's start. Here every name a
host process could import is planted in the folder each of the project's host processes starts
in: every standard-library module, every top-level module of the host's environment, and the
project's own package. A planted module writes a marker file (on the host only: the guest has
no such path) and then steps aside for the real module, so a leak is seen even when the process
goes on working. No marker may appear.

The static test finds the siblings: every argv in the package that starts this interpreter
must keep the working folder off sys.path (core/launch.py).
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.launch import has_safe_path
from sandbox_kernel.kernel.install import enterprise_gateway_spec, kernel_spec
from tests.kernel.conftest import RunningKernel, start_kernel

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox_kernel"

# The planted module: on the host, it leaves a marker; anywhere, it then loads the real module
# from the rest of sys.path and puts that in its place, so the process that imported it works
# on (and a guest cell that imports the name beside the notebook, as on ipykernel, gets the
# real module too).
PLANTED = """\
import sys as _sys
if _sys.platform != "wasi":
    with open({marker!r} + "/" + __name__ + "." + str(__import__("os").getpid()), "w"):
        pass
import importlib as _importlib
_here = __file__.rpartition("/")[0]
del _sys.modules[__name__]
_saved = _sys.path[:]
_sys.path[:] = [p for p in _sys.path if p not in ("", ".", _here)]
try:
    _sys.modules[__name__] = _importlib.import_module(__name__)
finally:
    _sys.path[:] = _saved
"""


def host_module_names() -> set[str]:
    """Every top-level name a host process of ours could import by name."""
    names = set(sys.stdlib_module_names) - {"sys", "builtins", "importlib", "__future__"}
    names.update(importlib.metadata.packages_distributions())
    names.update({"sandbox_kernel", "jupyter_client", "ipykernel", "zmq", "wasmtime"})
    return {name for name in names if name.isidentifier() and not name.startswith("_")}


def plant(folder: Path, markers: Path) -> None:
    """A module for every host name in `folder`; markers go to `markers` (outside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    markers.mkdir(parents=True, exist_ok=True)
    source = PLANTED.format(marker=str(markers))
    for name in host_module_names():
        (folder / f"{name}.py").write_text(source)
    package = folder / "sandbox_kernel"  # a package shadows a module of the same name
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(source)
    (package / "__main__.py").write_text(source)


def leaked(markers: Path) -> list[str]:
    return sorted(path.name for path in markers.iterdir())


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    folder, markers = tmp_path / "course", tmp_path / "markers"
    plant(folder, markers)
    yield folder, markers


@pytest.mark.parametrize("workspace_is_folder", [False, True], ids=["overlay", "workspace"])
def test_a_kernel_started_beside_planted_modules_imports_none(
    planted: tuple[Path, Path], workspace_is_folder: bool
) -> None:
    """The notebook-folder default (overlay) and the documented
    SANDBOX_KERNEL_WORKSPACE=<notebook folder>: the kernel starts, runs a cell that imports
    what a notebook imports, and the host imported nothing from the folder."""
    folder, markers = planted
    policy = folder.parent / "policy.toml"  # never inside a folder the guest can write
    policy.write_text("# the notebook defaults\n")
    env = {"SANDBOX_KERNEL_POLICY": str(policy), "SANDBOX_KERNEL_NOTEBOOK_FOLDER": "overlay"}
    if workspace_is_folder:
        env["SANDBOX_KERNEL_WORKSPACE"] = str(folder)
    running: RunningKernel = start_kernel(folder, extra_env=env)
    try:
        execution = running.run("import json, collections\njson.dumps(collections.Counter('aa'))")
        assert execution.status == "ok", execution.describe()
        assert execution.result() == "'{\"a\": 2}'"
    finally:
        running.shutdown()
    assert leaked(markers) == []


def test_the_remote_launcher_imports_nothing_from_its_folder(
    planted: tuple[Path, Path],
) -> None:
    """Enterprise Gateway's distributed spec starts our launcher in the remote user's folder."""
    folder, markers = planted
    argv = enterprise_gateway_spec("distributed")["argv"]
    assert isinstance(argv, list)
    done = subprocess.run(
        [*argv[: argv.index("sandbox_kernel.kernel.remote") + 1], "--help"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "usage" in done.stdout, done.stderr
    assert leaked(markers) == []


def test_the_planted_folder_is_a_real_trap(planted: tuple[Path, Path]) -> None:
    """Control: the same launch without -P runs the planted code on the host."""
    folder, markers = planted
    subprocess.run(
        [sys.executable, "-m", "sandbox_kernel.kernel.remote", "--help"],
        cwd=folder,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert leaked(markers), "a plain `python -m` should have imported the planted modules"


def test_every_kernel_spec_keeps_the_working_folder_off_sys_path() -> None:
    specs = [
        kernel_spec(),
        kernel_spec(guarded=True),
        enterprise_gateway_spec("distributed"),
        enterprise_gateway_spec("kubernetes", image="example/sandbox:1"),
    ]
    for spec in specs:
        argv = spec["argv"]
        assert isinstance(argv, list) and has_safe_path(argv), argv
    shipped = (PACKAGE / "kernel" / "spec" / "kernel.json").read_text()
    assert '"-P"' in shipped


def _interpreter_argvs(tree: ast.AST) -> Iterator[ast.List]:
    """List literals whose first item is sys.executable (an argv that starts this Python)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Attribute) and first.attr == "executable":
                yield node


def test_no_host_argv_starts_python_with_the_working_folder_on_sys_path() -> None:
    """Siblings: any argv the package builds from sys.executable carries -P or -I (or goes
    through core.launch.host_python). The native backend's child is named: it is the unsafe
    backend and puts its workspace on sys.path on purpose, after -P."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "guest" in path.relative_to(PACKAGE).parts:
            continue  # runs inside the sandbox
        tree = ast.parse(path.read_text(), filename=str(path))
        for argv in _interpreter_argvs(tree):
            flags = {e.value for e in argv.elts if isinstance(e, ast.Constant)}
            if not flags & {"-P", "-I"}:
                offenders.append(f"{path.relative_to(PACKAGE)}:{argv.lineno}")
    assert offenders == []
