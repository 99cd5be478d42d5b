"""The guest library: IPython and its pure-Python dependencies, for sessions that run cells
through IPython (the kernel's), and the package data the guest image left out.

The wheels are pinned with hashes in `sandbox_kernel/guest/requirements.txt`. pip installs them
from the package index with `--only-binary=:all:` (never an sdist built on the host),
`--require-hashes` and `--no-deps` into a private folder keyed by the requirements' digest;
sessions see that folder read-only at `GUEST_PATH`. Package data (guest/package-data.txt:
scikit-learn's sample images) is taken from the same version's wheel, hash-pinned too, and kept
under `_package_data/<package>/`. It is made once per machine: by
`sandbox-kernel warm`, by bin/setup, or by the first session that needs it.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import io
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host import GUEST_PYTHON
from sandbox_kernel.host.cache import cache_dir

__all__ = [
    "DATA_FOLDER",
    "GUEST_PATH",
    "PACKAGE_DATA",
    "PACKAGE_MODULES",
    "GuestLibraryError",
    "guest_library",
    "is_installed",
    "library_folder",
    "requirements_text",
]

GUEST_PATH = "/usr/local/lib/site-packages"  # where sessions see the library
# Package data the image left out (guest/package-data.txt): package -> the wheel's folder of
# it. The library keeps it at DATA_FOLDER/<package>/<folder name>; the guest adds
# DATA_FOLDER/<package> to the package's __path__ (guest/imports.py).
DATA_PINS = "package-data.txt"
DATA_FOLDER = "_package_data"
PACKAGE_DATA = {"sklearn.datasets": "sklearn/datasets/images/"}
# The wheel the data is taken from: one fixed file, whatever the host (CPython 3.12, Linux).
_DATA_PLATFORM = ("--platform", "manylinux_2_28_x86_64", "--python-version", "3.12",
                  "--implementation", "cp", "--abi", "cp312")  # fmt: skip
# Pure-Python modules of the image's packages that the image left out (guest/package-modules.txt):
# package -> the wheel's files, kept at DATA_FOLDER/<package>/, which the guest adds to the
# package's __path__ as for data. matplotlib's WebAgg core is what ipympl draws with.
MODULE_PINS = "package-modules.txt"
PACKAGE_MODULES = {"matplotlib.backends": ("matplotlib/backends/backend_webagg_core.py",)}
_MODULE_PLATFORM = ("--platform", "manylinux2014_x86_64", "--python-version", "3.11",
                    "--implementation", "cp", "--abi", "cp311")  # fmt: skip
_PIP_TIMEOUT_SECONDS = 600
_DONE = ".complete"
_LAYOUT = "package data: JPEG as PNG"  # how the folder is made, beside what: part of its key
_LOCK = threading.Lock()


class GuestLibraryError(SandboxExecutionError):
    """The guest library could not be installed (no package index, a hash mismatch)."""


@functools.cache
def requirements_text() -> str:
    """What the library holds: the IPython wheels' pins and the package data's."""
    files = importlib.resources.files("sandbox_kernel.guest")
    pins = ("requirements.txt", DATA_PINS, MODULE_PINS)
    return "".join(files.joinpath(name).read_text() for name in pins)


def guest_library() -> Path:
    """The installed library's folder, installing it first when this machine has none."""
    folder = library_folder()
    with _LOCK:
        if not is_installed():
            _install(requirements_text(), folder)
    return folder


def library_folder() -> Path:
    """Where this version's library is (or will be) installed."""
    key = hashlib.sha256((requirements_text() + _LAYOUT).encode()).hexdigest()[:24]
    return cache_dir() / "guest-library" / key


def is_installed() -> bool:
    return (library_folder() / _DONE).is_file()


def _install(text: str, folder: Path) -> None:
    """pip into a temporary folder beside `folder`, renamed into place when complete."""
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
    try:
        files = importlib.resources.files("sandbox_kernel.guest")
        requirements = staging / "requirements.txt"
        requirements.write_text(files.joinpath("requirements.txt").read_text())
        target = staging / "lib"
        # Downloaded, then unpacked here: `pip install --target` with another Python's
        # version is refused by the pip that Python 3.11's venvs bring (23.x), download is not.
        downloads = staging / "downloads"
        _pip(
            staging, "download", "--implementation", "py", "--platform", "any",
            "--python-version", GUEST_PYTHON, "--dest", str(downloads), "-r", str(requirements),
        )  # fmt: skip
        for wheel in sorted(downloads.glob("*.whl")):
            _unpack(wheel, target)
        data = staging / "package-data.txt"
        data.write_text(files.joinpath(DATA_PINS).read_text())
        wheels = staging / "wheels"
        _pip(staging, "download", *_DATA_PLATFORM, "--dest", str(wheels), "-r", str(data))
        for wheel in wheels.glob("*.whl"):
            _extract_data(wheel, target)
        modules = staging / MODULE_PINS
        modules.write_text(files.joinpath(MODULE_PINS).read_text())
        sources = staging / "module-wheels"
        _pip(staging, "download", *_MODULE_PLATFORM, "--dest", str(sources), "-r", str(modules))
        for wheel in sources.glob("*.whl"):
            _extract_modules(wheel, target)
        (target / _DONE).write_text(text)
        if folder.exists():
            shutil.rmtree(folder)
        target.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip(folder: Path, *args: str) -> None:
    """The host's pip: wheels only, each checked against its pinned hash, no dependencies. It
    runs in `folder` (ours) with Python's isolated mode: `python -m pip` started in the
    kernel's folder (a notebook's, maybe a cloned one) would import a ./pip found there. The
    user's pip configuration is read (it says how this host reaches its index); the pinned
    hashes decide what is installed."""
    command = [
        sys.executable, "-I", "-m", "pip", args[0], "--quiet", "--disable-pip-version-check",
        "--no-input", "--no-deps", "--only-binary=:all:", "--require-hashes", *args[1:],
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command,
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=_PIP_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GuestLibraryError(
            f"installing the guest library took over {_PIP_TIMEOUT_SECONDS} s"
        ) from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise GuestLibraryError(
            "could not install the guest library (IPython, package data) from the package "
            f"index (pip said: {' / '.join(detail) or done.returncode}); "
            "run `sandbox-kernel warm` where the index is reachable"
        )


def _unpack(wheel: Path, target: Path) -> None:
    """A pure-Python wheel into `target` as an installer lays it out: its packages and its
    .dist-info; of its .data, only purelib and platlib (scripts and headers: nothing to run).
    Every member must land inside `target`."""
    base = target.resolve()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            name = member.filename
            if member.is_dir():
                continue
            top, _, rest = name.partition("/")
            if top.endswith(".data"):
                kind, _, rest = rest.partition("/")
                if kind not in ("purelib", "platlib") or not rest:
                    continue
                name = rest
            path = (target / name).resolve()
            if not path.is_relative_to(base):
                raise GuestLibraryError(f"{wheel.name} holds a file outside its folder: {name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(member))


def _extract_data(wheel: Path, target: Path) -> None:
    """PACKAGE_DATA's folders of `wheel` into `target`: plain files, by name, nothing else."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            for package, prefix in PACKAGE_DATA.items():
                rest = name.removeprefix(prefix)
                if rest != name and rest and "/" not in rest:
                    path = target / DATA_FOLDER / package / Path(prefix).name / rest
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(_readable(archive.read(name), rest))


def _extract_modules(wheel: Path, target: Path) -> None:
    """PACKAGE_MODULES' files of `wheel` into `target`, by their exact names."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for package, files in PACKAGE_MODULES.items():
            for name in files:
                if name in names:
                    path = target / DATA_FOLDER / package / Path(name).name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(archive.read(name))


def _readable(data: bytes, name: str) -> bytes:
    """A file as the guest can read it: the guest's Pillow has no JPEG decoder, so a JPEG is
    decoded here and kept, under its own name (packages look for *.jpg), as a lossless PNG of
    the same pixels. Pillow reads an image by its content, whatever its name."""
    if not name.lower().endswith((".jpg", ".jpeg")):
        return data
    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(data)) as image:
        image.save(out, format="PNG")
    return out.getvalue()
