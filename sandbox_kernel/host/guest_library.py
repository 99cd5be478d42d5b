"""The guest library: IPython and its pure-Python dependencies, for sessions that run cells
through IPython (the kernel's).

The wheels are pinned with hashes in `sandbox_kernel/guest/requirements.txt`. pip installs them
from the package index with `--only-binary=:all:` (never an sdist built on the host),
`--require-hashes` and `--no-deps` into a private folder keyed by the requirements' digest;
sessions see that folder read-only at `GUEST_PATH`. It is made once per machine: by
`sandbox-kernel warm`, by bin/setup, or by the first session that needs it.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host.engine import cache_dir

__all__ = ["GUEST_PATH", "GuestLibraryError", "guest_library", "requirements_text"]

GUEST_PATH = "/usr/local/lib/site-packages"  # where sessions see the library
GUEST_PYTHON = "3.15"  # the guest's Python: the wheels are chosen for it, not for the host
_PIP_TIMEOUT_SECONDS = 600
_DONE = ".complete"
_LOCK = threading.Lock()


class GuestLibraryError(SandboxExecutionError):
    """The guest library could not be installed (no package index, a hash mismatch)."""


def requirements_text() -> str:
    return (
        importlib.resources.files("sandbox_kernel.guest").joinpath("requirements.txt").read_text()
    )


def guest_library() -> Path:
    """The installed library's folder, installing it first when this machine has none."""
    text = requirements_text()
    folder = cache_dir() / "guest-library" / hashlib.sha256(text.encode()).hexdigest()[:24]
    with _LOCK:
        if not (folder / _DONE).is_file():
            _install(text, folder)
    return folder


def _install(text: str, folder: Path) -> None:
    """pip into a temporary folder beside `folder`, renamed into place when complete."""
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
    try:
        requirements = staging / "requirements.txt"
        requirements.write_text(text)
        target = staging / "lib"
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-input", "--no-deps", "--only-binary=:all:", "--require-hashes",
            "--no-compile", "--implementation", "py", "--platform", "any",
            "--python-version", GUEST_PYTHON, "--target", str(target), "-r", str(requirements),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise GuestLibraryError(
                f"installing the guest's IPython took over {_PIP_TIMEOUT_SECONDS} s"
            ) from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise GuestLibraryError(
                "could not install the guest's IPython from the package index "
                f"(pip said: {' / '.join(detail) or done.returncode}); "
                "run `sandbox-kernel warm` where the index is reachable"
            )
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: nothing to run
        (target / _DONE).write_text(text)
        if folder.exists():
            shutil.rmtree(folder)
        target.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
