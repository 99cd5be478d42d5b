"""PyodideReplSandbox: a persistent session in Pyodide under Node.js. UNSAFE: no sandbox.

Pyodide is CPython compiled to WebAssembly for JavaScript hosts. Under Node.js it is not an
isolation boundary: a cell's `import js` reaches Node's `process` (signals to the user's other
processes, native addons, the network). So this backend is labelled unsafe exactly as the
native one is, and Node runs under its permission model as far as it goes:

- file system: reads of Pyodide's own files, our two scripts and the workspace; writes only
  to the workspace (mounted at the policy's guest path, /app, and the working folder);
- no child processes (`--allow-child-process` is not given); worker threads are allowed,
  since Pyodide runs in one so the main thread can deliver interrupts;
- not limited by Node 20: the network, signals to other processes, native addons.

The child is `node pyodide_js/host.mjs ...`; its worker loads Pyodide and runs the native
backend's own Python side (native/child.py and the cell driver) inside it, speaking the same
JSON-RPC protocol over the same four pipes. So everything above the process (bridges,
streaming callbacks, timeout, cancel, get_variable, a hard stop that restarts and loses the
state) is NativeReplSandbox's code. A soft cancel is SIGINT to Node, whose main thread sets
Pyodide's interrupt buffer: KeyboardInterrupt at the cell's next bytecode.

Pyodide comes from the npm registry (the package `pyodide`, pinned with its SHA-512 below):
`sandbox-kernel pyodide install` fetches the tarball into the cache folder. That package holds
the interpreter and the standard library only; the scientific packages Pyodide's CDN serves
(numpy, pandas, ...) cannot be loaded offline, and a cell that imports one is told so.

Must not import: wasmtime (host/ does that), anything Jupyter.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Final

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.repl.models import REPLConfig
from sandbox_kernel.repl.native import NativeReplSandbox
from sandbox_kernel.repl.native.process import CHILD, DRIVER, Child
from sandbox_kernel.repl.protocol import DRIVER_PARTS

__all__ = [
    "PYODIDE_VERSION",
    "PyodideReplSandbox",
    "PyodideUnavailable",
    "install_pyodide",
    "pyodide_folder",
]

PYODIDE_VERSION: Final = "314.0.7"  # CPython 3.14.2
# The npm registry's "integrity" of pyodide-314.0.7.tgz (npm view pyodide@314.0.7 dist).
_PYODIDE_SHA512: Final = (
    "0YvXxEhfEdpLfb/XkM2BFAeMROq0iMUX2bzzH9pOttyMcWkwq+HbE5uyuGD82LN7y2q+SNvi/6V5JEsOlD2R1A=="
)
_REGISTRY: Final = "https://registry.npmjs.org"
_MAX_TARBALL_BYTES: Final = 64 * 1024 * 1024
_NEEDED: Final = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip")
_JS: Final = Path(__file__).resolve().with_name("pyodide_js")
_FETCH_TIMEOUT_SECONDS: Final = 300


class PyodideUnavailable(SandboxExecutionError):
    """Node.js or the Pyodide package is missing (the message says how to install it)."""


def pyodide_folder(index_url: str | list[str] | None = None) -> Path:
    """The folder Pyodide loads from: `index_url` (a path, or a list whose first entry is
    used, as the seed's option), else the pinned package in the cache folder.

    Raises:
        PyodideUnavailable: the folder lacks Pyodide's files, or names a URL (Node loads
            Pyodide from files here; this machine's CDN is out of reach).
    """
    if isinstance(index_url, list):
        if not index_url:
            raise PyodideUnavailable("pyodide_index_url is an empty list")
        index_url = index_url[0]
    if index_url is None:
        folder = cached_pyodide()
        hint = "run `sandbox-kernel pyodide install` (it fetches the pinned npm package)"
    else:
        if "://" in index_url and not index_url.startswith("file://"):
            raise PyodideUnavailable(
                f"pyodide_index_url {index_url!r} is a URL: this backend loads Pyodide from "
                "a local folder (`sandbox-kernel pyodide install` puts one in the cache)"
            )
        folder = Path(index_url.removeprefix("file://")).expanduser().resolve()
        hint = "point pyodide_index_url at a folder holding the npm package `pyodide`"
    missing = [name for name in _NEEDED if not (folder / name).is_file()]
    if missing:
        raise PyodideUnavailable(f"Pyodide is not in {folder} (missing {missing[0]}): {hint}")
    return folder


def cached_pyodide() -> Path:
    return cache_dir() / "pyodide" / PYODIDE_VERSION


def install_pyodide(registry: str | None = None) -> Path:
    """Fetch the pinned `pyodide` npm package into the cache folder (once) and return it.

    The tarball is checked against its SHA-512 before anything is unpacked; only regular
    files under `package/` with plain relative names are written, into a temporary folder
    renamed into place at the end.

    Raises:
        PyodideUnavailable: the registry could not be reached, or sent something else.
    """
    target = cached_pyodide()
    if all((target / name).is_file() for name in _NEEDED):
        return target
    npm_registry = os.environ.get("npm_config_registry")  # noqa: SIM112 (npm's own name)
    base = (registry or npm_registry or _REGISTRY).rstrip("/")
    url = f"{base}/pyodide/-/pyodide-{PYODIDE_VERSION}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=_FETCH_TIMEOUT_SECONDS) as response:
            data = response.read(_MAX_TARBALL_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise PyodideUnavailable(f"could not fetch {url}: {exc}") from exc
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
    if len(data) > _MAX_TARBALL_BYTES or digest != _PYODIDE_SHA512:
        raise PyodideUnavailable(f"{url} is not the pinned pyodide {PYODIDE_VERSION} (SHA-512)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        staging = Path(scratch) / "package"
        staging.mkdir()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive.getmembers():
                name = PurePosixPath(member.name)
                if not member.isfile() or name.parts[:1] != ("package",) or ".." in name.parts:
                    continue
                destination = staging.joinpath(*name.parts[1:])
                destination.parent.mkdir(parents=True, exist_ok=True)
                source = archive.extractfile(member)
                if source is not None:
                    destination.write_bytes(source.read())
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


@functools.cache
def _node() -> tuple[str, tuple[int, ...]]:
    """Node.js's path and version; PyodideUnavailable when there is none."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise PyodideUnavailable(
            "the pyodide backend needs Node.js 20 or newer (Debian: apt-get install nodejs)"
        )
    try:
        text = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        version = tuple(int(part) for part in text.strip().lstrip("v").split(".")[:3])
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise PyodideUnavailable(f"{node} --version failed: {exc}") from exc
    if version < (20,):
        raise PyodideUnavailable(f"Node.js {text.strip()} is too old: Pyodide needs 20 or newer")
    return node, version


class PyodideReplSandbox(NativeReplSandbox):
    """A persistent Python session in Pyodide under Node.js. UNSAFE: NOT A SANDBOX.

    `import js` reaches Node (see the module's text for what its permission model holds and
    what it does not). Same API and behaviour as NativeReplSandbox: a hard stop (cancel past
    its grace, the timeout) restarts Node, losing the session's state. The workspace is
    mounted at the policy's guest path (/app), the working folder.
    """

    kind = "Pyodide"
    unsafe_warning = (
        "the pyodide REPL backend runs cells in Pyodide under Node.js, which is NO sandbox "
        "(`import js` reaches Node: the network, signals, addons): use it only for trusted code"
    )

    def __init__(self, config: REPLConfig | None = None) -> None:
        super().__init__(config)
        self.index_folder = pyodide_folder(self.config.pyodide_index_url)
        self.node, self.node_version = _node()

    def _launch(self) -> Child:
        return Child(self.workspace, self._env(), self._command)

    def _command(self, requests_fd: int, replies_fd: int) -> list[str]:
        permission = (
            "--permission" if self.node_version >= (22, 13) else "--experimental-permission"
        )
        readable = (self.index_folder, _JS, CHILD, DRIVER.parent, self.workspace)  # the parts
        return [
            self.node,
            permission,
            *(f"--allow-fs-read={path}" for path in readable),
            f"--allow-fs-write={self.workspace}",
            "--allow-worker",  # Pyodide's own thread; no --allow-child-process
            "--no-warnings",  # the permission model's "experimental" notices, not the cell's
            str(_JS / "host.mjs"),
            str(self.index_folder),
            str(CHILD),
            str(DRIVER),
            str(self.workspace),
            self.config.policy.guest_mount_path,
            str(requests_fd),
            str(replies_fd),
            ",".join(file for _, file in DRIVER_PARTS),
        ]
